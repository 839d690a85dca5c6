-- The registry records also keep the digest of each tool's declaration
-- that the chain last recorded, so that a new registry.loaded entry can
-- name the tools added, removed and changed since. Records from before
-- hold {} and name no changes.

-- +goose Up
ALTER TABLE registry_records ADD COLUMN tools TEXT NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE registry_records DROP COLUMN tools;
