-- The pending list is sorted by time left by default: its index reads the
-- tenant's awaiting proposals in expiry order, a page at a time.
-- Each reviewer reads times in a zone of their own (an IANA name; '' until
-- the browser's zone or the reviewer's choice is stored).

-- +goose Up
CREATE INDEX proposals_tenant_status_expires ON proposals (tenant_id, status, expires_at, id);
ALTER TABLE users ADD COLUMN time_zone TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE users DROP COLUMN time_zone;
DROP INDEX proposals_tenant_status_expires;
