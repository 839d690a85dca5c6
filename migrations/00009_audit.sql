-- +goose Up

-- The audit log: one hash chain per tenant. body is the entry exactly as
-- hashed (canonical JSON holding tenant, seq, prev, at, kind, actor,
-- proposal_id and data); hash = "sha256:" + hex(SHA-256(body)); prev is the
-- hash of entry seq-1 ("" for seq 1). The primary key (tenant_id, seq) is
-- what keeps the chain linear: two transactions that read the same head
-- cannot both append seq+1. Entries are never updated or deleted; the store
-- has no such method, and triggers (added by the store after migrating,
-- since their syntax differs between SQLite and PostgreSQL) refuse both.
CREATE TABLE audit_entries (
    tenant_id    TEXT NOT NULL REFERENCES tenants(id),
    seq          BIGINT NOT NULL CHECK (seq >= 1),
    prev_hash    TEXT NOT NULL,
    hash         TEXT NOT NULL,
    kind         TEXT NOT NULL,
    proposal_id  TEXT NOT NULL DEFAULT '',
    body         TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, seq)
);
CREATE INDEX audit_entries_proposal ON audit_entries (tenant_id, proposal_id, seq);

-- Signed checkpoints: a JWS (typ countersign-audit-checkpoint+jwt) over a
-- chain's head hash and length, made periodically by the server and on
-- export.
CREATE TABLE audit_checkpoints (
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    seq         BIGINT NOT NULL,
    hash        TEXT NOT NULL,
    kid         TEXT NOT NULL,
    jws         TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, seq)
);

-- Audit reader keys: bearer keys ("csa_…") that may read one tenant's audit
-- log through the API and do nothing else. Only the hash is stored.
CREATE TABLE audit_readers (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    name        TEXT NOT NULL,
    key_hash    TEXT NOT NULL UNIQUE,
    created_at  BIGINT NOT NULL,
    revoked_at  BIGINT,
    UNIQUE (tenant_id, name)
);

-- The signed receipt (typ countersign-receipt+jwt) of a settled execution,
-- written by the same UPDATE that records the outcome.
ALTER TABLE executions ADD COLUMN receipt TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE executions DROP COLUMN receipt;
DROP TABLE audit_readers;
DROP TABLE audit_checkpoints;
DROP TABLE audit_entries;
