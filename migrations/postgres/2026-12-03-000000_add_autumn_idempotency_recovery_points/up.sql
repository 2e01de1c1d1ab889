-- Recovery points: the last step a multi-transaction handler finished, bound
-- to the fingerprint of the request that set it, kept for the record's TTL
-- (a claim that re-takes the key after a crash leaves them in place).
ALTER TABLE autumn_idempotency_keys ADD COLUMN IF NOT EXISTS recovery_point TEXT;
ALTER TABLE autumn_idempotency_keys ADD COLUMN IF NOT EXISTS recovery_body_hash BYTEA;
ALTER TABLE autumn_idempotency_keys ADD COLUMN IF NOT EXISTS recovery_expires_at BIGINT;
-- The sweeper keeps a row while its recovery point lives too.
DROP INDEX IF EXISTS autumn_idempotency_keys_expiry;
CREATE INDEX IF NOT EXISTS autumn_idempotency_keys_expiry
    ON autumn_idempotency_keys (GREATEST(COALESCE(lock_expires_at, 0), COALESCE(record_expires_at, 0), COALESCE(recovery_expires_at, 0)));
