ALTER TABLE autumn_commit_jobs DROP COLUMN trace_context;
