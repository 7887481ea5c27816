-- +goose Up
-- Whether a refund returned the whole payment is a fact Guardian can know
-- where the event itself does not say (issue 31): what the payment's own
-- paid event says was paid against what its refunds returned, in minor
-- units and one currency. amount and currency are a paying event's amount
-- paid, or a refund's amount returned (refund_cumulative: the payment's
-- refunded total so far), read from signed fields; refund_id names the
-- refund, so that the several events of one refund count once. refund_of
-- names the payment of a refund whose share is not decided yet; it is
-- cleared when its refunds are found whole (reverses is set then), and its
-- index holds only those, so a paying event asks it in its own insert at
-- the cost of one probe of a small index. No CHECK constraints: adding one
-- would read every stored event; the values come from the providers'
-- parsers, which refuse what is not an amount.
ALTER TABLE webhook_event
    ADD COLUMN amount bigint,
    ADD COLUMN currency text,
    ADD COLUMN refund_id text,
    ADD COLUMN refund_cumulative boolean NOT NULL DEFAULT false,
    ADD COLUMN refund_of text COLLATE "C";
CREATE INDEX webhook_event_refund_of ON webhook_event (provider, refund_of) WHERE refund_of IS NOT NULL;

-- +goose Down
DROP INDEX webhook_event_refund_of;
ALTER TABLE webhook_event
    DROP COLUMN refund_of,
    DROP COLUMN refund_cumulative,
    DROP COLUMN refund_id,
    DROP COLUMN currency,
    DROP COLUMN amount;
