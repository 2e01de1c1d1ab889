-- Durable after-commit hooks: a row written in the transaction of the
-- mutation that caused it, run by the worker after that transaction commits.
-- state: 'pending' (due at run_at, which a worker running it moves to the end
-- of its lease), 'done', or 'dead' (out of attempts, or refused for good).
CREATE TABLE IF NOT EXISTS autumn_commit_jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    hook TEXT NOT NULL,
    record_id TEXT NOT NULL,
    idempotency_key TEXT,
    payload TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    run_at BIGINT NOT NULL,
    last_error TEXT,
    created_at BIGINT NOT NULL,
    finished_at BIGINT
);
-- Duplicate attempts of one request write one row. Rows without a key
-- (NULL) never conflict: every mutation outside an idempotent request is
-- its own.
CREATE UNIQUE INDEX IF NOT EXISTS autumn_commit_jobs_dedupe
    ON autumn_commit_jobs (idempotency_key, hook, record_id);
-- What the worker polls: the due pending rows of one hook.
CREATE INDEX IF NOT EXISTS autumn_commit_jobs_due
    ON autumn_commit_jobs (hook, run_at) WHERE state = 'pending';
