-- +goose Up

-- Every running server registers itself here and renews its heartbeat every
-- few seconds. An execution records the instance that holds its current
-- attempt; when that instance's heartbeat is stale, the attempt was
-- abandoned (the process crashed) and another instance's reconciler may
-- take it over before the lease runs out.
CREATE TABLE instances (
    id            TEXT PRIMARY KEY,
    started_at    BIGINT NOT NULL,
    heartbeat_at  BIGINT NOT NULL
);

ALTER TABLE executions ADD COLUMN owner_instance TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE executions DROP COLUMN owner_instance;
DROP TABLE instances;
