-- +goose Up
-- How each event arrived: a webhook delivery, or fetched from the
-- provider's events API by a backfill. Both go through the same intake.
ALTER TABLE webhook_event ADD COLUMN origin text NOT NULL DEFAULT 'webhook'
    CHECK (origin IN ('webhook', 'backfill'));

-- How far each provider's backfill has stored everything: the next run
-- lists events created from here (less an overlap). It only moves forward,
-- and only after every event of a run is stored.
CREATE TABLE backfill_checkpoint (
    provider    text        PRIMARY KEY,
    stored_to   timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE backfill_checkpoint;
ALTER TABLE webhook_event DROP COLUMN origin;
