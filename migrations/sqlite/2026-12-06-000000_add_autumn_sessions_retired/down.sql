ALTER TABLE autumn_sessions DROP COLUMN retired;
