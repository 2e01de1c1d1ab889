DROP INDEX autumn_sessions_principal;
ALTER TABLE autumn_sessions DROP COLUMN principal;
