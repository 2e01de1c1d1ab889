-- The W3C traceparent of the span that queued the job, when traces are
-- exported: the job's span links to it, so the request and the work it
-- queued read as one trace. NULL when export is off.
ALTER TABLE autumn_commit_jobs ADD COLUMN trace_context TEXT;
