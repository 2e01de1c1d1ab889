-- API tokens, found by their public prefix. Only a SHA-256 hash of the
-- token is kept, never the token. Times are milliseconds since the Unix
-- epoch on the app's clock; last_used_at is written at most once a minute.
CREATE TABLE IF NOT EXISTS autumn_api_tokens (
    prefix       TEXT PRIMARY KEY NOT NULL,
    token_hash   BLOB NOT NULL,
    principal    TEXT NOT NULL,
    name         TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT,
    last_used_at BIGINT,
    revoked_at   BIGINT
);
-- Listing a principal's tokens.
CREATE INDEX IF NOT EXISTS autumn_api_tokens_principal ON autumn_api_tokens (principal);
