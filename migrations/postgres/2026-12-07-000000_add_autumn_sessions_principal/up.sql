-- Who a session is signed in as, so that ending every session of a user
-- (a password change, "sign out everywhere") is one indexed UPDATE. Rows
-- written before the column existed have none: their users were signed in
-- by a build that did not index them.
ALTER TABLE autumn_sessions ADD COLUMN IF NOT EXISTS principal TEXT;
CREATE INDEX IF NOT EXISTS autumn_sessions_principal ON autumn_sessions (principal)
    WHERE principal IS NOT NULL;
