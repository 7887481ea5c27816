-- +goose Up
-- Every payment id in one collation (issue 23). Migration 00016 gave
-- webhook_event's ids the "C" collation; fulfilment.payment_id and
-- webhook_event.reverses kept the database's. A comparison between columns
-- of two collations is made in neither index's: intake's checks, "is this
-- payment taken back?" and "how many of its keys were declined?", read by
-- provider alone through webhook_event_reverses and
-- fulfilment_payment_failed and filtered every row of the provider. At a
-- million payments that was 10,000 reversals per new payment: intake fell
-- to 0.07x its speed on an empty database (`just bench-scale`). In one
-- collation each check is one index lookup. Equality is the same under a
-- deterministic collation; only the indexes are rebuilt, the table is not
-- rewritten.
ALTER TABLE fulfilment ALTER COLUMN payment_id TYPE text COLLATE "C";
ALTER TABLE webhook_event ALTER COLUMN reverses TYPE text COLLATE "C";

-- +goose Down
ALTER TABLE webhook_event ALTER COLUMN reverses TYPE text COLLATE "default";
ALTER TABLE fulfilment ALTER COLUMN payment_id TYPE text COLLATE "default";
