DROP INDEX IF EXISTS autumn_commit_jobs_claim;
ALTER TABLE autumn_commit_jobs DROP COLUMN IF EXISTS request_id;
ALTER TABLE autumn_commit_jobs DROP COLUMN IF EXISTS priority;
DROP INDEX IF EXISTS autumn_commit_jobs_expiry;
ALTER TABLE autumn_commit_jobs DROP COLUMN IF EXISTS expires_at;
