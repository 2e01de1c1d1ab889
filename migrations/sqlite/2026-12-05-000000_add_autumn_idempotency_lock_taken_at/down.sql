ALTER TABLE autumn_idempotency_keys DROP COLUMN lock_taken_at;
