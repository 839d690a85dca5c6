-- Effect preview: what the business system said a write would do (its
-- facts and before → after values) when it was proposed, and the digest of
-- that description, which approvers confirm with the arguments' digest.
-- A decision records the effect digest its reviewer was shown.

-- +goose Up
ALTER TABLE proposals ADD COLUMN effect TEXT NOT NULL DEFAULT '';
ALTER TABLE proposals ADD COLUMN effect_digest TEXT NOT NULL DEFAULT '';
ALTER TABLE decisions ADD COLUMN effect_seen TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE decisions DROP COLUMN effect_seen;
ALTER TABLE proposals DROP COLUMN effect_digest;
ALTER TABLE proposals DROP COLUMN effect;
