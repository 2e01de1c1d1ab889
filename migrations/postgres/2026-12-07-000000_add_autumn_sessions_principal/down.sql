DROP INDEX IF EXISTS autumn_sessions_principal;
ALTER TABLE autumn_sessions DROP COLUMN IF EXISTS principal;
