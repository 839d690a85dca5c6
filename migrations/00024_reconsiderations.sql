-- A change of group membership can complete what a waiting proposal's
-- tier requires: an approval recorded before its reviewer joined a group
-- counts toward that group's factor once they have. The change queues each
-- such proposal here, in its own transaction; the server then checks the
-- business state and confirms it (issuing the token) in another, and a
-- queued proposal that a crash or an unreachable business system left
-- behind is taken up by the background pass. A proposal is queued once.

-- +goose Up
CREATE TABLE reconsiderations (
    proposal_id     TEXT PRIMARY KEY REFERENCES proposals(id),
    tenant_id       TEXT NOT NULL REFERENCES tenants(id),
    queued_at       BIGINT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL
);
CREATE INDEX reconsiderations_due ON reconsiderations (next_attempt_at);

-- +goose Down
DROP TABLE reconsiderations;
