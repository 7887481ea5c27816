-- +goose Up
-- A delivery's own id, where the provider sends one beside the event's:
-- Shopify's X-Shopify-Webhook-Id, stored beside X-Shopify-Event-Id (which
-- the event dedupes on) because Shopify's own pages disagree on which one
-- names a duplicate. The first delivery's is kept.
ALTER TABLE webhook_event ADD COLUMN delivery_id text CHECK (delivery_id <> '');

-- +goose Down
ALTER TABLE webhook_event DROP COLUMN delivery_id;
