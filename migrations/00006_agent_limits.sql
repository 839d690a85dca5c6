-- +goose Up

-- Per-agent limits. limit_overrides holds what administrators set for a
-- tenant (agent_id '') or one agent; NULL inherits, 0 means no limit.
CREATE TABLE limit_overrides (
    tenant_id             TEXT NOT NULL REFERENCES tenants(id),
    agent_id              TEXT NOT NULL DEFAULT '',
    proposals_per_minute  INTEGER CHECK (proposals_per_minute >= 0),
    open_proposals        INTEGER CHECK (open_proposals >= 0),
    concurrent_waits      INTEGER CHECK (concurrent_waits >= 0),
    updated_at            BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, agent_id)
);

-- One row per agent, shared by every instance: the proposal rate as a
-- generic cell rate algorithm (rate_tat_us is the theoretical arrival time
-- of the next proposal, microseconds since the epoch), advanced only by a
-- conditional UPDATE; and the row lock that serializes the agent's
-- open-proposal and long-poll counts with the insert they guard.
CREATE TABLE agent_usage (
    agent_id     TEXT PRIMARY KEY REFERENCES agents(id),
    rate_tat_us  BIGINT NOT NULL DEFAULT 0
);

-- Long-polls held by agents, one row each, so that the count holds across
-- instances; expires_at ends a row left behind by a crashed instance.
CREATE TABLE agent_waits (
    id          TEXT PRIMARY KEY,
    agent_id    TEXT NOT NULL REFERENCES agents(id),
    expires_at  BIGINT NOT NULL
);
CREATE INDEX agent_waits_agent ON agent_waits (agent_id, expires_at);

-- Counting an agent's open proposals must not scan its history.
CREATE INDEX proposals_agent_status ON proposals (agent_id, status, expires_at);

-- +goose Down
DROP INDEX proposals_agent_status;
DROP TABLE agent_waits;
DROP TABLE agent_usage;
DROP TABLE limit_overrides;
