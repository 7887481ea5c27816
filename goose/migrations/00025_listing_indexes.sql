-- +goose NO TRANSACTION
-- +goose Up
-- Listings at scale (issue 23; docs/performance.md, "As the tables grow"):
-- the operators' lists return the first page in their order, whatever the
-- filter, without sorting or scanning the table for matches.
--
-- Fulfilments list oldest first by (created_at, id), filtered by state,
-- by provider, or not: at 1 million payments, "fulfilled, oldest first" sorted 700,000 rows
-- (480 ms). Events list newest first by id, filtered by type or provider:
-- a type with no events read every row backwards (930 ms at 1 million).
-- Each index appends at its right edge (ids and creation times grow), so an
-- insert touches one hot page of each.
--
-- CONCURRENTLY: a deployment with millions of rows keeps taking webhooks
-- while they build.
CREATE INDEX CONCURRENTLY IF NOT EXISTS fulfilment_created ON fulfilment (created_at, id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS fulfilment_state_created ON fulfilment (state, created_at, id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS fulfilment_provider_created ON fulfilment (provider, created_at, id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_event_type_id ON webhook_event (event_type, id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_event_provider_id ON webhook_event (provider, id);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS webhook_event_provider_id;
DROP INDEX CONCURRENTLY IF EXISTS webhook_event_type_id;
DROP INDEX CONCURRENTLY IF EXISTS fulfilment_provider_created;
DROP INDEX CONCURRENTLY IF EXISTS fulfilment_state_created;
DROP INDEX CONCURRENTLY IF EXISTS fulfilment_created;
