DROP INDEX IF EXISTS autumn_commit_jobs_claim;
ALTER TABLE autumn_commit_jobs DROP COLUMN request_id;
ALTER TABLE autumn_commit_jobs DROP COLUMN priority;
DROP INDEX IF EXISTS autumn_commit_jobs_expiry;
ALTER TABLE autumn_commit_jobs DROP COLUMN expires_at;
