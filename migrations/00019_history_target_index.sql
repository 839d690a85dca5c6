-- The console's history searched by target (a resource id, or a batch's
-- set digest) reads that target's proposals in each status newest first
-- from an index, instead of walking the tenant's whole history in that
-- status to find the few that match.

-- +goose Up
CREATE INDEX proposals_tenant_resource_status_created ON proposals (tenant_id, resource, status, created_at DESC, id DESC);

-- +goose Down
DROP INDEX proposals_tenant_resource_status_created;
