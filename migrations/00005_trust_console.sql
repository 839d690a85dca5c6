-- +goose Up

-- Who enrolled each console user and who last reset their password: a user
-- id, "cli" for the command line, or '' for users made before this was
-- recorded. Separation of duties compares these with the agent's creator.
ALTER TABLE users ADD COLUMN created_by TEXT NOT NULL DEFAULT '';
ALTER TABLE users ADD COLUMN password_reset_by TEXT NOT NULL DEFAULT '';
ALTER TABLE users ADD COLUMN password_reset_at BIGINT;

-- Who created each agent (and so saw its key): a user id, "cli" or ''.
ALTER TABLE agents ADD COLUMN created_by TEXT NOT NULL DEFAULT '';

-- An approval stops counting when its reviewer is disabled while the
-- proposal still awaits confirmation; the row stays, for the history.
ALTER TABLE decisions ADD COLUMN voided_at BIGINT;

-- Per-account sign-in backoff: after its free failures a key takes no
-- attempt before next_at (Unix milliseconds; 0 = no wait), and each
-- further attempt doubles the wait.
ALTER TABLE login_attempts ADD COLUMN next_at BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE login_attempts DROP COLUMN next_at;
ALTER TABLE decisions DROP COLUMN voided_at;
ALTER TABLE agents DROP COLUMN created_by;
ALTER TABLE users DROP COLUMN password_reset_at;
ALTER TABLE users DROP COLUMN password_reset_by;
ALTER TABLE users DROP COLUMN created_by;
