-- Idempotency locks and records. Times are milliseconds since the Unix epoch
-- on the app's clock (not the database's).
CREATE TABLE IF NOT EXISTS autumn_idempotency_keys (
    storage_key       TEXT PRIMARY KEY NOT NULL,
    lock_owner        TEXT,
    lock_expires_at   BIGINT,
    record            BLOB,
    body_hash         BLOB,
    record_owner      TEXT,
    record_expires_at BIGINT
);
-- The sweeper deletes rows whose lock and record have both expired.
CREATE INDEX IF NOT EXISTS autumn_idempotency_keys_expiry
    ON autumn_idempotency_keys (MAX(COALESCE(lock_expires_at, 0), COALESCE(record_expires_at, 0)));
