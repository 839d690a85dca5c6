-- +goose Up

-- Signed-in console sessions. The cookie carries the raw session id; only
-- its SHA-256 is stored, so a copy of this table signs nobody in.
CREATE TABLE console_sessions (
    id_hash       TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL REFERENCES tenants(id),
    user_id       TEXT NOT NULL REFERENCES users(id),
    csrf_token    TEXT NOT NULL,
    amr           TEXT NOT NULL DEFAULT '[]',
    created_at    BIGINT NOT NULL,
    last_seen_at  BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    revoked_at    BIGINT
);
CREATE INDEX console_sessions_user ON console_sessions (user_id);
CREATE INDEX console_sessions_expires ON console_sessions (expires_at);

-- Sign-in attempts per key ("user:<tenant>\n<name>" or "ip:<address>") in
-- a fixed window that starts with the first attempt. An attempt is counted
-- before the password is checked and forgiven on success, so parallel
-- guesses cannot overshoot the limit.
CREATE TABLE login_attempts (
    attempt_key   TEXT PRIMARY KEY,
    window_start  BIGINT NOT NULL,
    failures      INTEGER NOT NULL DEFAULT 0 CHECK (failures >= 0)
);

-- The cookie keys, created once by whichever instance starts first, so that
-- sessions survive restarts and hold across instances.
CREATE TABLE console_keys (
    name        TEXT PRIMARY KEY,
    hash_key    TEXT NOT NULL,
    block_key   TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);

-- +goose Down
DROP TABLE console_keys;
DROP TABLE login_attempts;
DROP TABLE console_sessions;
