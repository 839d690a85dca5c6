-- +goose Up

-- One row naming this installation. Its random id is part of every
-- idempotency key sent to a business system, so that two installations
-- sharing one business system can never collide there. Written once, by
-- whichever instance starts first (see store.Installation).
CREATE TABLE installation (
    singleton   INTEGER PRIMARY KEY CHECK (singleton = 1),
    id          TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);

-- Agents read only their own proposals unless granted the tenant's
-- (countersign agent create --read-all).
ALTER TABLE agents ADD COLUMN read_all BOOLEAN NOT NULL DEFAULT FALSE;

-- Request keys are idempotent per agent (SPEC section 3): the unique
-- constraint moves from (tenant, request_key) to (tenant, agent,
-- request_key), and executions gain the downstream key that was (and will
-- be) sent to the business system. Neither database can drop an inline
-- UNIQUE constraint with one statement that both understand, so the
-- tables that hold or reference proposals are rebuilt: new tables, a copy
-- of every row, the old ones dropped (children first, so no foreign key
-- is ever violated), the new ones renamed. Column order and contents stay
-- the same.

CREATE TABLE proposals_v4 (
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
    UNIQUE (tenant_id, agent_id, request_key)
);
INSERT INTO proposals_v4 (id, tenant_id, agent_id, tool, arguments, args_digest, preview, resource,
    resource_set, resource_set_digest, resource_count, resource_label, state_version, risk_tier,
    confirmation, quorum, ttl_ms, allow_self_approval, policy_version, request_key, context, problems,
    status, revision, created_at, expires_at, updated_at)
SELECT id, tenant_id, agent_id, tool, arguments, args_digest, preview, resource,
    resource_set, resource_set_digest, resource_count, resource_label, state_version, risk_tier,
    confirmation, quorum, ttl_ms, allow_self_approval, policy_version, request_key, context, problems,
    status, revision, created_at, expires_at, updated_at
FROM proposals;

CREATE TABLE decisions_v4 (
    id           TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL REFERENCES tenants(id),
    proposal_id  TEXT NOT NULL REFERENCES proposals_v4(id),
    user_id      TEXT NOT NULL REFERENCES users(id),
    kind         TEXT NOT NULL CHECK (kind IN ('approve', 'decline')),
    reason       TEXT NOT NULL DEFAULT '',
    digest_seen  TEXT NOT NULL,
    amr          TEXT NOT NULL DEFAULT '[]',
    evidence     TEXT NOT NULL DEFAULT '',
    created_at   BIGINT NOT NULL,
    UNIQUE (proposal_id, user_id)
);
INSERT INTO decisions_v4 (id, tenant_id, proposal_id, user_id, kind, reason, digest_seen, amr, evidence, created_at)
SELECT id, tenant_id, proposal_id, user_id, kind, reason, digest_seen, amr, evidence, created_at FROM decisions;

CREATE TABLE tokens_v4 (
    jti           TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL REFERENCES tenants(id),
    proposal_id   TEXT NOT NULL UNIQUE REFERENCES proposals_v4(id),
    agent_id      TEXT NOT NULL REFERENCES agents(id),
    kid           TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('issued', 'consumed', 'revoked', 'expired')),
    compact       TEXT NOT NULL,
    issued_at     BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    consumed_at   BIGINT,
    execution_id  TEXT
);
INSERT INTO tokens_v4 (jti, tenant_id, proposal_id, agent_id, kid, status, compact, issued_at, expires_at, consumed_at, execution_id)
SELECT jti, tenant_id, proposal_id, agent_id, kid, status, compact, issued_at, expires_at, consumed_at, execution_id FROM tokens;

-- downstream_key is the Idempotency-Key the business system sees. Earlier
-- versions sent the raw request key, so existing executions keep that as
-- their downstream key: asking about them must use the key they were sent
-- under.
CREATE TABLE executions_v4 (
    id              TEXT PRIMARY KEY,
    tenant_id       TEXT NOT NULL REFERENCES tenants(id),
    proposal_id     TEXT NOT NULL UNIQUE REFERENCES proposals_v4(id),
    token_jti       TEXT NOT NULL UNIQUE REFERENCES tokens_v4(jti),
    request_key     TEXT NOT NULL,
    operation       TEXT NOT NULL,
    args_digest     TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('executing', 'succeeded', 'failed_retryable',
                        'failed_terminal', 'unknown')),
    attempts        INTEGER NOT NULL DEFAULT 1,
    provider_ref    TEXT NOT NULL DEFAULT '',
    result          TEXT NOT NULL DEFAULT '',
    error_code      TEXT NOT NULL DEFAULT '',
    error_message   TEXT NOT NULL DEFAULT '',
    lease_until     BIGINT NOT NULL,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    completed_at    BIGINT,
    downstream_key  TEXT NOT NULL,
    UNIQUE (tenant_id, downstream_key)
);
INSERT INTO executions_v4 (id, tenant_id, proposal_id, token_jti, request_key, operation, args_digest, status,
    attempts, provider_ref, result, error_code, error_message, lease_until, created_at, updated_at,
    completed_at, downstream_key)
SELECT id, tenant_id, proposal_id, token_jti, request_key, operation, args_digest, status,
    attempts, provider_ref, result, error_code, error_message, lease_until, created_at, updated_at,
    completed_at, request_key
FROM executions;

CREATE TABLE webauthn_ceremonies_v4 (
    id            TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL REFERENCES tenants(id),
    user_id       TEXT REFERENCES users(id),
    kind          TEXT NOT NULL CHECK (kind IN ('registration', 'enrollment', 'assertion', 'removal', 'login')),
    proposal_id   TEXT REFERENCES proposals_v4(id),
    args_digest   TEXT NOT NULL DEFAULT '',
    key_id        TEXT REFERENCES webauthn_credentials(id),
    nonce         TEXT NOT NULL DEFAULT '',
    challenge     TEXT NOT NULL UNIQUE,
    session_data  TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    consumed_at   BIGINT
);
INSERT INTO webauthn_ceremonies_v4 (id, tenant_id, user_id, kind, proposal_id, args_digest, key_id, nonce,
    challenge, session_data, created_at, expires_at, consumed_at)
SELECT id, tenant_id, user_id, kind, proposal_id, args_digest, key_id, nonce,
    challenge, session_data, created_at, expires_at, consumed_at
FROM webauthn_ceremonies;

DROP TABLE webauthn_ceremonies;
DROP TABLE executions;
DROP TABLE decisions;
DROP TABLE tokens;
DROP TABLE proposals;

ALTER TABLE proposals_v4 RENAME TO proposals;
ALTER TABLE decisions_v4 RENAME TO decisions;
ALTER TABLE tokens_v4 RENAME TO tokens;
ALTER TABLE executions_v4 RENAME TO executions;
ALTER TABLE webauthn_ceremonies_v4 RENAME TO webauthn_ceremonies;

CREATE INDEX proposals_tenant_created ON proposals (tenant_id, created_at DESC, id DESC);
CREATE INDEX proposals_status_expires ON proposals (status, expires_at);
CREATE INDEX tokens_status_expires ON tokens (status, expires_at);
CREATE INDEX executions_status_lease ON executions (status, lease_until);
CREATE INDEX webauthn_ceremonies_expires ON webauthn_ceremonies (expires_at);

-- +goose Down
-- Not reversible without losing data: two agents of a tenant may now hold
-- the same request key, which the old constraint forbids. Restore a backup
-- taken before the upgrade instead.
