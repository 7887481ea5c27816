-- +goose NO TRANSACTION
-- +goose Up
-- fulfilment_idempotency_key (migration 00019) serves no query: nothing in
-- Guardian looks a fulfilment up by its key (the key derives from the
-- payment, and every lookup goes by the payment or the row's id). It is
-- keyed by a hash, so each write lands on a random leaf, and it is written
-- at every intake insert and at both of a dispatch's updates (neither is
-- HOT: the state is indexed). `just bench-scale` put intake at 10 million
-- payments at 0.52x a baseline beside it, with four such randomly keyed
-- indexes on intake's path; this is the one that does nothing for it
-- (docs/performance.md, "As the tables grow").
DROP INDEX CONCURRENTLY IF EXISTS fulfilment_idempotency_key;

-- +goose Down
CREATE INDEX CONCURRENTLY IF NOT EXISTS fulfilment_idempotency_key ON fulfilment (idempotency_key);
