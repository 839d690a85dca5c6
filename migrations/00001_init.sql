-- +goose Up
CREATE TABLE tenants (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    created_at  BIGINT NOT NULL
);

CREATE TABLE users (
    id             TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL REFERENCES tenants(id),
    name           TEXT NOT NULL,
    role           TEXT NOT NULL CHECK (role IN ('reviewer', 'admin')),
    password_hash  TEXT NOT NULL,
    disabled       BOOLEAN NOT NULL DEFAULT FALSE,
    created_at     BIGINT NOT NULL,
    UNIQUE (tenant_id, name)
);

CREATE TABLE agents (
    id             TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL REFERENCES tenants(id),
    name           TEXT NOT NULL,
    owner_user_id  TEXT REFERENCES users(id),
    key_hash       TEXT NOT NULL UNIQUE,
    created_at     BIGINT NOT NULL,
    revoked_at     BIGINT,
    UNIQUE (tenant_id, name)
);

CREATE TABLE proposals (
    id                   TEXT PRIMARY KEY,
    tenant_id            TEXT NOT NULL REFERENCES tenants(id),
    agent_id             TEXT NOT NULL REFERENCES agents(id),
    tool                 TEXT NOT NULL,
    arguments            TEXT NOT NULL,
    args_digest          TEXT NOT NULL,
    preview              TEXT NOT NULL,
    resource             TEXT NOT NULL DEFAULT '',
    resource_set         TEXT NOT NULL DEFAULT '',
    resource_set_digest  TEXT NOT NULL DEFAULT '',
    resource_count       INTEGER NOT NULL DEFAULT 0,
    resource_label       TEXT NOT NULL DEFAULT '',
    state_version        TEXT NOT NULL DEFAULT '',
    risk_tier            TEXT NOT NULL,
    confirmation         TEXT NOT NULL CHECK (confirmation IN ('click', 'webauthn')),
    quorum               INTEGER NOT NULL CHECK (quorum >= 1),
    ttl_ms               BIGINT NOT NULL CHECK (ttl_ms > 0),
    allow_self_approval  BOOLEAN NOT NULL DEFAULT FALSE,
    policy_version       TEXT NOT NULL,
    request_key          TEXT NOT NULL,
    context              TEXT NOT NULL DEFAULT '',
    problems             TEXT NOT NULL DEFAULT '',
    status               TEXT NOT NULL CHECK (status IN ('proposed', 'rejected', 'awaiting_confirmation',
                             'declined', 'cancelled', 'expired', 'confirmed', 'revoked', 'executing',
                             'succeeded', 'failed_retryable', 'failed_terminal', 'unknown')),
    revision             BIGINT NOT NULL DEFAULT 1,
    created_at           BIGINT NOT NULL,
    expires_at           BIGINT NOT NULL,
    updated_at           BIGINT NOT NULL,
    UNIQUE (tenant_id, request_key)
);
CREATE INDEX proposals_tenant_created ON proposals (tenant_id, created_at DESC, id DESC);
CREATE INDEX proposals_status_expires ON proposals (status, expires_at);

CREATE TABLE decisions (
    id           TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL REFERENCES tenants(id),
    proposal_id  TEXT NOT NULL REFERENCES proposals(id),
    user_id      TEXT NOT NULL REFERENCES users(id),
    kind         TEXT NOT NULL CHECK (kind IN ('approve', 'decline')),
    reason       TEXT NOT NULL DEFAULT '',
    digest_seen  TEXT NOT NULL,
    amr          TEXT NOT NULL DEFAULT '[]',
    evidence     TEXT NOT NULL DEFAULT '',
    created_at   BIGINT NOT NULL,
    UNIQUE (proposal_id, user_id)
);

CREATE TABLE tokens (
    jti           TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL REFERENCES tenants(id),
    proposal_id   TEXT NOT NULL UNIQUE REFERENCES proposals(id),
    agent_id      TEXT NOT NULL REFERENCES agents(id),
    kid           TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('issued', 'consumed', 'revoked', 'expired')),
    compact       TEXT NOT NULL,
    issued_at     BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    consumed_at   BIGINT,
    execution_id  TEXT
);
CREATE INDEX tokens_status_expires ON tokens (status, expires_at);

CREATE TABLE executions (
    id             TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL REFERENCES tenants(id),
    proposal_id    TEXT NOT NULL UNIQUE REFERENCES proposals(id),
    token_jti      TEXT NOT NULL UNIQUE REFERENCES tokens(jti),
    request_key    TEXT NOT NULL,
    operation      TEXT NOT NULL,
    args_digest    TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('executing', 'succeeded', 'failed_retryable',
                       'failed_terminal', 'unknown')),
    attempts       INTEGER NOT NULL DEFAULT 1,
    provider_ref   TEXT NOT NULL DEFAULT '',
    result         TEXT NOT NULL DEFAULT '',
    error_code     TEXT NOT NULL DEFAULT '',
    error_message  TEXT NOT NULL DEFAULT '',
    lease_until    BIGINT NOT NULL,
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL,
    completed_at   BIGINT,
    UNIQUE (tenant_id, request_key)
);
CREATE INDEX executions_status_lease ON executions (status, lease_until);

CREATE TABLE signing_keys (
    kid          TEXT PRIMARY KEY,
    private_key  TEXT NOT NULL,
    public_key   TEXT NOT NULL,
    active       BOOLEAN NOT NULL,
    created_at   BIGINT NOT NULL
);
CREATE UNIQUE INDEX signing_keys_one_active ON signing_keys (active) WHERE active;

-- The demo business system behind the built-in demo_ledger adapter.
CREATE TABLE demo_orders (
    tenant_id       TEXT NOT NULL REFERENCES tenants(id),
    id              TEXT NOT NULL,
    label           TEXT NOT NULL,
    currency        TEXT NOT NULL,
    payable_minor   BIGINT NOT NULL CHECK (payable_minor >= 0),
    refunded_minor  BIGINT NOT NULL DEFAULT 0 CHECK (refunded_minor >= 0 AND refunded_minor <= payable_minor),
    version         BIGINT NOT NULL DEFAULT 1,
    PRIMARY KEY (tenant_id, id)
);

CREATE TABLE demo_customers (
    tenant_id  TEXT NOT NULL REFERENCES tenants(id),
    id         TEXT NOT NULL,
    name       TEXT NOT NULL,
    email      TEXT NOT NULL,
    version    BIGINT NOT NULL DEFAULT 1,
    PRIMARY KEY (tenant_id, id)
);

CREATE TABLE demo_logs (
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    id          TEXT NOT NULL,
    message     TEXT NOT NULL,
    deleted_at  BIGINT,
    PRIMARY KEY (tenant_id, id)
);

CREATE TABLE demo_outbox (
    tenant_id    TEXT NOT NULL REFERENCES tenants(id),
    request_key  TEXT NOT NULL,
    customer_id  TEXT NOT NULL,
    template     TEXT NOT NULL,
    subject      TEXT NOT NULL,
    body         TEXT NOT NULL,
    send_at      BIGINT,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, request_key)
);

-- The demo ledger's own idempotency record: one row per request key, written
-- in the same transaction as the business change it describes.
CREATE TABLE demo_ledger_executions (
    tenant_id     TEXT NOT NULL REFERENCES tenants(id),
    request_key   TEXT NOT NULL,
    tool          TEXT NOT NULL,
    status        TEXT NOT NULL,
    provider_ref  TEXT NOT NULL,
    result        TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, request_key)
);

-- +goose Down
DROP TABLE demo_ledger_executions;
DROP TABLE demo_outbox;
DROP TABLE demo_logs;
DROP TABLE demo_customers;
DROP TABLE demo_orders;
DROP TABLE signing_keys;
DROP TABLE executions;
DROP TABLE tokens;
DROP TABLE decisions;
DROP TABLE proposals;
DROP TABLE agents;
DROP TABLE users;
DROP TABLE tenants;
