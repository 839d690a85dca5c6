-- +goose Up

-- The outbox: one row per proposal or execution state change (and per
-- reviewer decision), written in the same transaction as the change, so
-- that an event exists exactly when its change committed. Ids are ULIDs
-- ("evt_…"), which sort by creation time; a reader resumes after an id.
-- payload is a small JSON object and never carries a token.
CREATE TABLE events (
    id           TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL REFERENCES tenants(id),
    agent_id     TEXT NOT NULL REFERENCES agents(id),
    proposal_id  TEXT NOT NULL REFERENCES proposals(id),
    type         TEXT NOT NULL,
    status       TEXT NOT NULL,
    revision     BIGINT NOT NULL,
    payload      TEXT NOT NULL DEFAULT '{}',
    created_at   BIGINT NOT NULL
);
CREATE INDEX events_agent ON events (tenant_id, agent_id, id);

-- Where events are sent: an agent's own endpoint (agent_id set: that
-- agent's proposals only) or a tenant-wide one an administrator registered
-- (agent_id NULL). The signing secret ("whsec_…") is shown once at
-- registration. An endpoint is never deleted, only disabled, so that its
-- delivery log stays readable.
CREATE TABLE webhook_endpoints (
    id           TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL REFERENCES tenants(id),
    agent_id     TEXT REFERENCES agents(id),
    url          TEXT NOT NULL,
    secret       TEXT NOT NULL,
    description  TEXT NOT NULL DEFAULT '',
    created_at   BIGINT NOT NULL,
    disabled_at  BIGINT
);
CREATE INDEX webhook_endpoints_tenant ON webhook_endpoints (tenant_id, agent_id);

-- One row per event and destination: a webhook endpoint (target = endpoint
-- id) or a reviewer notification channel (target = 'email' or 'slack'),
-- created with the event. A dispatcher claims a due row by a conditional
-- UPDATE that takes a lease (lease_until) and counts the attempt, so two
-- dispatchers never send the same row at once; a crash leaves the lease
-- to run out and the row is sent again (at least once).
CREATE TABLE deliveries (
    id               TEXT PRIMARY KEY,
    tenant_id        TEXT NOT NULL REFERENCES tenants(id),
    event_id         TEXT NOT NULL REFERENCES events(id),
    channel          TEXT NOT NULL CHECK (channel IN ('webhook', 'email', 'slack')),
    target           TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at  BIGINT NOT NULL,
    lease_until      BIGINT NOT NULL DEFAULT 0,
    last_code        INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT NOT NULL DEFAULT '',
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    delivered_at     BIGINT,
    UNIQUE (event_id, channel, target)
);
CREATE INDEX deliveries_due ON deliveries (status, next_attempt_at);
CREATE INDEX deliveries_target ON deliveries (tenant_id, target, created_at);

-- Every attempt of a delivery: the delivery log.
CREATE TABLE delivery_attempts (
    id            TEXT PRIMARY KEY,
    delivery_id   TEXT NOT NULL REFERENCES deliveries(id),
    attempt       INTEGER NOT NULL,
    status_code   INTEGER NOT NULL DEFAULT 0,
    error         TEXT NOT NULL DEFAULT '',
    duration_ms   BIGINT NOT NULL DEFAULT 0,
    created_at    BIGINT NOT NULL,
    UNIQUE (delivery_id, attempt)
);

-- Reviewers' e-mail addresses for notifications.
CREATE TABLE notification_addresses (
    user_id     TEXT PRIMARY KEY REFERENCES users(id),
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    email       TEXT NOT NULL,
    updated_at  BIGINT NOT NULL
);

-- +goose Down
DROP TABLE notification_addresses;
DROP TABLE delivery_attempts;
DROP TABLE deliveries;
DROP TABLE webhook_endpoints;
DROP TABLE events;
