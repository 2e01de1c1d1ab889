ALTER TABLE autumn_commit_jobs DROP COLUMN IF EXISTS trace_context;
