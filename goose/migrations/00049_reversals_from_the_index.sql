-- +goose NO TRANSACTION
-- +goose Up
-- Reversals read from their index alone (docs/performance.md, "The
-- sweep's rounds at ten million payments").
--
-- Every reader of reversals reads them through payment_reversal or
-- guardian_reversals_of (migrations 00044 and 00047): the reversing
-- event's id, event_id and revokes, found by (provider, reverses), and
-- for a grant again its suspends. The index held only the keys, so each
-- reversal found cost a visit to its event's row: one page each,
-- scattered through a table as large as the history. The sweep's round
-- over a burst, which reads every reversal once, took 161 to 225 ms at
-- ten million payments (100,000 reversals in 9.4 GB of events), most of
-- it on those visits. Carrying the columns the readers need in the index
-- makes it an index-only read: 63 ms, the index 14 MB against 7.6 MB.
--
-- The columns carried change only with the keys (an event's id and
-- event_id never; revokes with reverses, when a refund is found whole;
-- suspends with the event), so the updates an event gets most (a
-- duplicate's count, its body pruned) stay HOT as they were.
--
-- CONCURRENTLY: a deployment keeps taking webhooks while it builds. A
-- build interrupted (the process killed, the statement cancelled) leaves
-- the index behind, invalid, which IF NOT EXISTS would take for built:
-- the old index would go and reversals would be read by scanning every
-- event. An invalid one is dropped and built again; the old index goes
-- only after the build has succeeded.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass('webhook_event_reversals') AND NOT indisvalid) THEN
        DROP INDEX webhook_event_reversals;
    END IF;
END
$$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_event_reversals ON webhook_event (provider, reverses)
    INCLUDE (id, event_id, revokes, suspends) WHERE reverses IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS webhook_event_reverses;

-- +goose Down
-- The same care the other way: an invalid old index, left by a rollback
-- interrupted in its build, is built again before the new one goes.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass('webhook_event_reverses') AND NOT indisvalid) THEN
        DROP INDEX webhook_event_reverses;
    END IF;
END
$$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_event_reverses ON webhook_event (provider, reverses) WHERE reverses IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS webhook_event_reversals;
