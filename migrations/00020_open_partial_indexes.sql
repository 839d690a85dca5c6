-- Sweeps and the pending views only ever ask about open rows: proposals
-- awaiting confirmation, tokens issued and not yet redeemed, executions
-- not yet settled. Their indexes hold those rows only (partial indexes),
-- so that a row that settles costs one index delete and history never
-- enters them, however long it grows; an execute no longer rewrites their
-- entries at each change of status.
--
-- The queries they serve carry each predicate verbatim, with the same
-- literals: SQLite uses a partial index only when a term of the query's
-- WHERE clause is the index's predicate, and PostgreSQL proves implication
-- from constants only (models/store/open.go holds the query side).

-- +goose Up
DROP INDEX proposals_status_expires;
CREATE INDEX proposals_awaiting_expires ON proposals (expires_at) WHERE status = 'awaiting_confirmation';
DROP INDEX proposals_agent_status;
CREATE INDEX proposals_agent_awaiting ON proposals (agent_id, expires_at) WHERE status = 'awaiting_confirmation';
DROP INDEX proposals_tenant_status_expires;
CREATE INDEX proposals_tenant_awaiting_expires ON proposals (tenant_id, expires_at, id) WHERE status = 'awaiting_confirmation';
DROP INDEX tokens_status_expires;
CREATE INDEX tokens_issued_expires ON tokens (expires_at) WHERE status = 'issued';
DROP INDEX executions_status_lease;
CREATE INDEX executions_open_lease ON executions (status, lease_until) WHERE status IN ('executing', 'failed_retryable', 'unknown');

-- +goose Down
DROP INDEX executions_open_lease;
CREATE INDEX executions_status_lease ON executions (status, lease_until);
DROP INDEX tokens_issued_expires;
CREATE INDEX tokens_status_expires ON tokens (status, expires_at);
DROP INDEX proposals_tenant_awaiting_expires;
CREATE INDEX proposals_tenant_status_expires ON proposals (tenant_id, status, expires_at, id);
DROP INDEX proposals_agent_awaiting;
CREATE INDEX proposals_agent_status ON proposals (agent_id, status, expires_at);
DROP INDEX proposals_awaiting_expires;
CREATE INDEX proposals_status_expires ON proposals (status, expires_at);
