-- When the current lock was taken (ms since the epoch, app clock), so key
-- administration can show how long its owner has held it. NULL for a lock
-- taken before this column existed and for a row without a lock.
ALTER TABLE autumn_idempotency_keys ADD COLUMN lock_taken_at BIGINT;
