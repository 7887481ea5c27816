-- +goose Up
-- A refund or a dispute names the payment it reverses as its provider
-- names payments (Stripe: the payment intent), but a subscription's
-- purchase is named by its Checkout Session (the first invoice's) or by a
-- renewal's invoice (docs/design.md, "Subscriptions"). A subscription's
-- invoices join the two: for each invoice, the subscription it bills,
-- whether it is the first, and the payment that paid it, as the
-- provider's signed events state them. Events state parts (Stripe's
-- invoice.paid the subscription, its invoice_payment.paid the payment):
-- each fact is kept as first stated, and the row joins them.
CREATE TABLE subscription_invoice (
    provider        text NOT NULL,
    invoice         text COLLATE "C" NOT NULL CHECK (invoice <> ''),
    payment         text COLLATE "C" CHECK (payment <> ''),
    subscription_id text COLLATE "C" CHECK (subscription_id <> ''),
    first           boolean,
    recorded_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, invoice),
    CHECK ((subscription_id IS NULL) = (first IS NULL))
);
CREATE INDEX subscription_invoice_payment ON subscription_invoice (provider, payment) WHERE payment IS NOT NULL;
CREATE INDEX subscription_invoice_first ON subscription_invoice (provider, subscription_id) WHERE first;

-- +goose Down
DROP TABLE subscription_invoice;
