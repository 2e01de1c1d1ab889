DROP TABLE IF EXISTS autumn_idempotency_keys;
