-- Every organization's audit chain records each token signing key once
-- (signing_key.added): when the key is added, or, for the keys that exist
-- when an organization is created, at the start of its chain. This table
-- says which keys a chain records already, so that each is recorded
-- exactly once, and so that keys the chain does not record yet (those from
-- before keys were recorded) are found at start-up without reading the
-- chain.

-- +goose Up
CREATE TABLE signing_key_records (
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    kid         TEXT NOT NULL REFERENCES signing_keys(kid),
    recorded_at BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, kid)
);

-- +goose Down
DROP TABLE signing_key_records;
