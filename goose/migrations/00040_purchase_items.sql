-- +goose Up
-- A purchase whose routes need what its events do not carry (a Stripe
-- Checkout Session's event names no line items) is recorded awaiting its
-- items: awaiting_items names the provider's object whose items its API
-- lists. Until a fetch brings them, the purchase pays for no action
-- (actions is empty) and no fulfilment is made of it; the fetch that
-- succeeds decides its actions and makes their rows in one transaction,
-- and clears awaiting_items. A fetch that fails leaves the purchase
-- awaiting, with how often it was tried and its last error, for operators.
ALTER TABLE purchase
    ADD COLUMN awaiting_items   text,
    ADD COLUMN routing_attempts integer NOT NULL DEFAULT 0,
    ADD COLUMN routing_error    text,
    ADD COLUMN routing_tried_at timestamptz,
    ADD CONSTRAINT purchase_awaiting_routes_nothing CHECK (awaiting_items IS NULL OR actions = '{}');

-- Operators, metrics and the prune read the purchases still awaiting.
CREATE INDEX purchase_awaiting ON purchase (routed_at) WHERE awaiting_items IS NOT NULL;

-- +goose Down
-- A purchase still awaiting its items is routed by nothing in the older
-- schema: it is dropped, and its events' replay routes it again.
DELETE FROM purchase WHERE awaiting_items IS NOT NULL;
DROP INDEX purchase_awaiting;
ALTER TABLE purchase
    DROP CONSTRAINT purchase_awaiting_routes_nothing,
    DROP COLUMN routing_tried_at,
    DROP COLUMN routing_error,
    DROP COLUMN routing_attempts,
    DROP COLUMN awaiting_items;
