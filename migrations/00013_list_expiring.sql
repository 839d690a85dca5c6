-- The pending list is sorted by time left by default: its index reads the
-- tenant's awaiting proposals in expiry order, a page at a time.

-- +goose Up
CREATE INDEX proposals_tenant_status_expires ON proposals (tenant_id, status, expires_at, id);

-- +goose Down
DROP INDEX proposals_tenant_status_expires;
