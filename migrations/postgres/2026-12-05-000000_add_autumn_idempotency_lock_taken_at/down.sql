ALTER TABLE autumn_idempotency_keys DROP COLUMN IF EXISTS lock_taken_at;
