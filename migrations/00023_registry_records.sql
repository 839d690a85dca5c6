-- Every organization's audit chain records the tool registry servers run
-- with (registry.loaded: the file's digest, each tool's policy version)
-- when a server starts with another registry than the chain last recorded,
-- and when an organization is first seen. This table holds the digest each
-- chain last recorded, so that a start with the same registry records
-- nothing.

-- +goose Up
CREATE TABLE registry_records (
    tenant_id   TEXT PRIMARY KEY REFERENCES tenants(id),
    digest      TEXT NOT NULL,
    recorded_at BIGINT NOT NULL
);

-- +goose Down
DROP TABLE registry_records;
