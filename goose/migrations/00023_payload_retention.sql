-- +goose Up
-- Bounded growth (docs/operations.md, "What Guardian keeps, and for how
-- long"). An event's identity (provider, event id, type, payment) is kept
-- for good: it is what dedupes a late delivery. Its body, the provider's
-- payload with the buyer's personal data in it, is pruned after
-- GUARDIAN_PAYLOAD_RETENTION once nothing can need it again: it is
-- replaced by nothing and pruned_at records when.
ALTER TABLE webhook_event ADD COLUMN pruned_at timestamptz;

-- How far pruning has walked the events, in id order (ids grow with time):
-- each round starts where the last stopped, so no round rereads the table.
CREATE TABLE prune_cursor (
    name    text   PRIMARY KEY,
    last_id bigint NOT NULL
);

-- +goose Down
-- Pruned bodies are gone: the rows keep an empty body.
DROP TABLE prune_cursor;
ALTER TABLE webhook_event DROP COLUMN pruned_at;
