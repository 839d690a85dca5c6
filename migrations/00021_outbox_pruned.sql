-- The outbox (events, their deliveries and the delivery log) is pruned
-- once every delivery of an event is settled and the event is older than
-- the retention the server runs with. Pruning goes in event id order, so
-- one id remembers how far it got: an event stream resuming after an id
-- at or below it that is no longer there is told that events may have
-- been pruned since, instead of being refused as naming no event.

-- +goose Up
CREATE TABLE outbox_pruned (
    singleton  INTEGER PRIMARY KEY CHECK (singleton = 1),
    through    TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- +goose Down
DROP TABLE outbox_pruned;
