-- Server-side sessions, keyed by a hash of the session id (never the id the
-- cookie carries). expires_at is milliseconds since the Unix epoch on the
-- app's clock (not the database's).
CREATE TABLE IF NOT EXISTS autumn_sessions (
    storage_key TEXT PRIMARY KEY NOT NULL,
    record      BLOB NOT NULL,
    expires_at  BIGINT NOT NULL
);
-- The sweeper deletes expired sessions through it.
CREATE INDEX IF NOT EXISTS autumn_sessions_expiry ON autumn_sessions (expires_at);
