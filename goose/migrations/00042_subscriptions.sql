-- +goose Up
-- A subscription is one purchase that lives a while (docs/design.md,
-- "Subscriptions"). Its provider names it by the subscription's id across
-- its events; Guardian names its purchase as the event that started it
-- names the purchase (a Stripe subscription-mode Checkout Session's id), so
-- no key made before subscriptions were known changes. subscription links
-- the two, recorded in the transaction that records the start.
CREATE TABLE subscription (
    provider        text NOT NULL,
    subscription_id text COLLATE "C" NOT NULL CHECK (subscription_id <> ''),
    payment_id      text COLLATE "C" NOT NULL,
    started_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, subscription_id)
);
CREATE INDEX subscription_payment ON subscription (provider, payment_id);

-- An event that ends a subscription names it (ends). Once Guardian knows
-- the purchase the subscription's start paid for (then, or when the start
-- arrives after it), reverses names that purchase as a refund's does, and
-- revokes the actions whose policy takes a purchase back at its end.
ALTER TABLE webhook_event ADD COLUMN ends text COLLATE "C" CHECK (ends <> '');
CREATE INDEX webhook_event_ends ON webhook_event (provider, ends) WHERE ends IS NOT NULL;

-- +goose Down
UPDATE webhook_event SET reverses = NULL, revokes = NULL, reversal = NULL WHERE ends IS NOT NULL;
DROP INDEX webhook_event_ends;
ALTER TABLE webhook_event DROP COLUMN ends;
DROP TABLE subscription;
