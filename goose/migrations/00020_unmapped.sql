-- +goose Up
-- Nothing paid goes unseen: an event that says it is paid but names no
-- payment Guardian can read (no payment id where the provider's rules look,
-- an id that is not a string, a payment status Guardian does not know) is
-- stored and acknowledged as before, and now flagged with why, for the
-- dashboard, the API (GET /api/v1/events?unmapped=true) and the metrics.
ALTER TABLE webhook_event ADD COLUMN unmapped text CHECK (unmapped <> '');
-- Flagged events are few: the listing of them reads only them.
CREATE INDEX webhook_event_unmapped ON webhook_event (id) WHERE unmapped IS NOT NULL;

-- +goose Down
DROP INDEX webhook_event_unmapped;
ALTER TABLE webhook_event DROP COLUMN unmapped;
