-- Whether the session's id was retired (signed out, or rotated away), beside
-- the record that says so too: a live save checks it in the same statement
-- and never overwrites a retired row.
ALTER TABLE autumn_sessions ADD COLUMN retired BOOLEAN NOT NULL DEFAULT FALSE;
-- Rows retired before the column existed. The framework writes a record as
-- compact JSON whose top level ends with its "retired" field, optionally
-- followed by "v" (by the key order serde_json was built with), so a record
-- whose values hold the same text never matches.
UPDATE autumn_sessions SET retired = TRUE
    WHERE CAST(record AS TEXT) LIKE '%"retired":true}' OR CAST(record AS TEXT) LIKE '%"retired":true,"v":1}';
