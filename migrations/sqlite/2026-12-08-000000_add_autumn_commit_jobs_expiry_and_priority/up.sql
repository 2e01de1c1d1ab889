-- Finished jobs are kept until expires_at (milliseconds since the epoch),
-- set when a job ends done or dead; NULL while it is pending. The retention
-- sweep deletes by it, in batches.
ALTER TABLE autumn_commit_jobs ADD COLUMN expires_at BIGINT;
-- Rows that finished before the column existed get the default retention:
-- done 7 days, dead 30 days.
UPDATE autumn_commit_jobs SET expires_at = finished_at + 604800000
    WHERE state = 'done' AND expires_at IS NULL AND finished_at IS NOT NULL;
UPDATE autumn_commit_jobs SET expires_at = finished_at + 2592000000
    WHERE state = 'dead' AND expires_at IS NULL AND finished_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS autumn_commit_jobs_expiry
    ON autumn_commit_jobs (expires_at) WHERE expires_at IS NOT NULL;
-- Among a queue's due jobs, the higher priority runs first.
ALTER TABLE autumn_commit_jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
-- The id of the request that queued the job (its x-request-id), on every
-- log line of the job's runs.
ALTER TABLE autumn_commit_jobs ADD COLUMN request_id TEXT;
-- What the worker claims: due pending rows, highest priority first, read
-- in index order and stopped at the batch instead of sorted whole.
CREATE INDEX IF NOT EXISTS autumn_commit_jobs_claim
    ON autumn_commit_jobs (priority DESC, run_at, id) WHERE state = 'pending';
