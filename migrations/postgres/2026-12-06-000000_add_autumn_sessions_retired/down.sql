ALTER TABLE autumn_sessions DROP COLUMN IF EXISTS retired;
