DROP TABLE IF EXISTS autumn_commit_jobs;
