DROP INDEX IF EXISTS autumn_idempotency_keys_expiry;
ALTER TABLE autumn_idempotency_keys DROP COLUMN IF EXISTS recovery_expires_at;
ALTER TABLE autumn_idempotency_keys DROP COLUMN IF EXISTS recovery_body_hash;
ALTER TABLE autumn_idempotency_keys DROP COLUMN IF EXISTS recovery_point;
CREATE INDEX IF NOT EXISTS autumn_idempotency_keys_expiry
    ON autumn_idempotency_keys (GREATEST(COALESCE(lock_expires_at, 0), COALESCE(record_expires_at, 0)));
