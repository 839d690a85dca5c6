-- Standing mandates: a person grants, once, a bounded class of writes
-- (tool, resources, argument constraints, budget and/or use count, expiry,
-- agents). A mandate is asked for as a proposal of kind 'mandate' and made
-- live when that proposal is confirmed. Each write it confirms spends from
-- it by one conditional UPDATE in the transaction that issues the token.

-- +goose Up
ALTER TABLE proposals ADD COLUMN kind TEXT NOT NULL DEFAULT '' CHECK (kind IN ('', 'mandate'));
ALTER TABLE proposals ADD COLUMN mandate_id TEXT NOT NULL DEFAULT '';
ALTER TABLE proposals ADD COLUMN mandate_note TEXT NOT NULL DEFAULT '';

CREATE TABLE mandates (
    id            TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL REFERENCES tenants(id),
    proposal_id   TEXT NOT NULL UNIQUE REFERENCES proposals(id),
    tool          TEXT NOT NULL,
    terms         TEXT NOT NULL,
    terms_digest  TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('active', 'revoked')),
    budget        BIGINT CHECK (budget IS NULL OR budget > 0),
    spent         BIGINT NOT NULL DEFAULT 0 CHECK (spent >= 0),
    max_uses      BIGINT CHECK (max_uses IS NULL OR max_uses > 0),
    uses          BIGINT NOT NULL DEFAULT 0 CHECK (uses >= 0),
    expires_at    BIGINT NOT NULL,
    grantors      TEXT NOT NULL,
    granted_at    BIGINT NOT NULL,
    revoked_at    BIGINT,
    revoked_by    TEXT NOT NULL DEFAULT '',
    CHECK (budget IS NULL OR spent <= budget),
    CHECK (max_uses IS NULL OR uses <= max_uses)
);
CREATE INDEX mandates_tenant_tool ON mandates (tenant_id, tool, status);

-- Who granted each mandate: while any of them is disabled, the mandate
-- confirms nothing (the spending UPDATE checks it).
CREATE TABLE mandate_grantors (
    mandate_id  TEXT NOT NULL REFERENCES mandates(id),
    user_id     TEXT NOT NULL REFERENCES users(id),
    PRIMARY KEY (mandate_id, user_id)
);

-- +goose Down
DROP TABLE mandate_grantors;
DROP TABLE mandates;
ALTER TABLE proposals DROP COLUMN mandate_note;
ALTER TABLE proposals DROP COLUMN mandate_id;
ALTER TABLE proposals DROP COLUMN kind;
