-- Lists stay flat as history grows: each filter the API and the console use
-- has an index in the order the list is read (newest first), so a page reads
-- a page of rows whatever the number of settled proposals behind it.

-- +goose Up
CREATE INDEX proposals_tenant_status_created ON proposals (tenant_id, status, created_at DESC, id DESC);
CREATE INDEX proposals_tenant_agent_created ON proposals (tenant_id, agent_id, created_at DESC, id DESC);
CREATE INDEX proposals_tenant_agent_status_created ON proposals (tenant_id, agent_id, status, created_at DESC, id DESC);

-- +goose Down
DROP INDEX proposals_tenant_agent_status_created;
DROP INDEX proposals_tenant_agent_created;
DROP INDEX proposals_tenant_status_created;
