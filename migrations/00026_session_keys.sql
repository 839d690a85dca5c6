-- A session begun with a passkey remembers which key began it, so that the
-- sessions a key began end with it: when it is flagged as a possible copy,
-- when its owner removes it (from another session), and when the FIDO
-- metadata reports its model compromised. Sessions from before, and those
-- begun with a password, name no key. No foreign key: SQLite cannot drop a
-- column that has one, and the store writes only ids it has just read.

-- +goose Up
ALTER TABLE console_sessions ADD COLUMN key_id TEXT;
CREATE INDEX console_sessions_key ON console_sessions (key_id) WHERE key_id IS NOT NULL;

-- +goose Down
DROP INDEX console_sessions_key;
ALTER TABLE console_sessions DROP COLUMN key_id;
