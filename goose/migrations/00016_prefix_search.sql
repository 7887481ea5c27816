-- +goose Up
-- Browsing by id prefix, and joins from events to fulfilments in any state.
--
-- Event and payment ids are identifiers, compared byte for byte: they take
-- the "C" collation. A btree serves a prefix range only in a byte-order
-- collation, and an index serves only comparisons in its own collation, so
-- the columns carry it (every equality and range on them then uses the
-- indexes below). Under a deterministic collation equality, and so
-- uniqueness, is the same. Only the collation changes: no table rewrite,
-- the indexes are rebuilt.
ALTER TABLE webhook_event
    ALTER COLUMN event_id TYPE text COLLATE "C",
    ALTER COLUMN payment_id TYPE text COLLATE "C";

-- The id leads each index, so a search by id or prefix needs no provider;
-- lookups by (provider, id) use them as before. No index is added: intake
-- writes the same number of entries per event.
CREATE UNIQUE INDEX webhook_event_event_id_key ON webhook_event (event_id, provider);
ALTER TABLE webhook_event DROP CONSTRAINT webhook_event_provider_event_id_key;

DROP INDEX webhook_event_payment_idx;
CREATE INDEX webhook_event_payment_idx ON webhook_event (payment_id, provider) WHERE payment_id IS NOT NULL;

-- A search finds events, then their fulfilments, failed ones included: the
-- partial fulfilment_one_per_event could not serve that join for failed
-- rows, so it becomes a plain index over every row. What it guaranteed, one
-- live fulfilment per event, follows from fulfilment_one_per_payment: every
-- fulfilment of an event carries that event's payment (db.InsertFulfilments
-- copies it from the event row, and the guard trigger keeps it immutable).
DROP INDEX fulfilment_one_per_event;
CREATE INDEX fulfilment_event_idx ON fulfilment (event_pk);

-- +goose Down
DROP INDEX fulfilment_event_idx;
CREATE UNIQUE INDEX fulfilment_one_per_event ON fulfilment (event_pk) WHERE state <> 'failed';

DROP INDEX webhook_event_payment_idx;
ALTER TABLE webhook_event ADD CONSTRAINT webhook_event_provider_event_id_key UNIQUE (provider, event_id);
DROP INDEX webhook_event_event_id_key;

ALTER TABLE webhook_event
    ALTER COLUMN event_id TYPE text COLLATE "default",
    ALTER COLUMN payment_id TYPE text COLLATE "default";
CREATE INDEX webhook_event_payment_idx ON webhook_event (provider, payment_id) WHERE payment_id IS NOT NULL;
