-- +goose Up
-- Reversals (docs/design.md, "Taking back what was refunded or disputed").
--
-- A refund or dispute is stored like any event, with what it says
-- (reversal: "full refund", "partial refund", "dispute opened", "won",
-- "lost") and, when the deployment's policy takes the payment back for it,
-- the payment it reverses (reverses). Taking back is a second action on the
-- payment with the guarantees of the first: a fulfilment row with action
-- 'revoke', at most one live per payment, its own Idempotency-Key derived
-- from the payment, dispatched, parked and reconciled as a fulfilment is.
ALTER TABLE webhook_event ADD COLUMN reversal text CHECK (reversal <> '');
ALTER TABLE webhook_event ADD COLUMN reverses text CHECK (reverses <> '');
CREATE INDEX webhook_event_reverses ON webhook_event (provider, reverses) WHERE reverses IS NOT NULL;

ALTER TABLE fulfilment ADD COLUMN action text NOT NULL DEFAULT 'fulfil' CHECK (action IN ('fulfil', 'revoke'));
-- The gauges count revocations by state at every read: few rows, found
-- without reading the table.
CREATE INDEX fulfilment_revocations ON fulfilment (state) WHERE action = 'revoke';

-- Invariant 1, per action: one live fulfilment and one live revocation per
-- payment.
DROP INDEX fulfilment_one_per_payment;
CREATE UNIQUE INDEX fulfilment_one_per_payment ON fulfilment (provider, payment_id, action)
    WHERE state <> 'failed';

-- A revocation's key: the same derivation as a fulfilment's, in its own
-- namespace, so the receiver can never take one for the other.
-- +goose StatementBegin
CREATE FUNCTION guardian_revoke_key(provider text, payment_id text, declined bigint) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT 'gk1_' || left(encode(sha256(convert_to('guardian/v1/revoke:' || provider || ':' || declined || ':' || payment_id, 'UTF8')), 'hex'), 40)
$$;
-- +goose StatementEnd

-- pending -> cancelled: a payment reversed before its fulfilment went out
-- is never sent (nothing was done; the payment stays taken, so no later
-- event fulfils it). The action is immutable, like the identity.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION guardian_fulfilment_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.event_pk <> OLD.event_pk OR NEW.payment_id <> OLD.payment_id
        OR NEW.provider <> OLD.provider OR NEW.created_at <> OLD.created_at
        OR NEW.idempotency_key <> OLD.idempotency_key OR NEW.action <> OLD.action THEN
        RAISE EXCEPTION 'fulfilment %: identity columns are immutable', OLD.id USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.state = OLD.state THEN
        IF NEW.attempt <> OLD.attempt THEN
            RAISE EXCEPTION 'fulfilment %: attempt changes only when dispatching starts', OLD.id USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF NOT (OLD.state, NEW.state) IN (
        ('pending', 'dispatching'),
        ('pending', 'cancelled'),
        ('dispatching', 'fulfilled'),
        ('dispatching', 'needs_reconciliation'),
        ('dispatching', 'failed'),
        ('dispatching', 'pending'),
        ('needs_reconciliation', 'fulfilled'),
        ('needs_reconciliation', 'pending'),
        ('needs_reconciliation', 'cancelled'),
        ('needs_reconciliation', 'failed'),
        ('cancelled', 'needs_reconciliation')
    ) THEN
        RAISE EXCEPTION 'fulfilment %: illegal transition % -> %', OLD.id, OLD.state, NEW.state USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.state = 'dispatching' THEN
        IF NEW.attempt <> OLD.attempt + 1 THEN
            RAISE EXCEPTION 'fulfilment %: dispatching must take attempt %', OLD.id, OLD.attempt + 1 USING ERRCODE = 'check_violation';
        END IF;
    ELSIF NEW.attempt <> OLD.attempt THEN
        RAISE EXCEPTION 'fulfilment %: attempt changes only when dispatching starts', OLD.id USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.state = 'needs_reconciliation' THEN
        NEW.checks := 0;
        NEW.next_check_at := NULL;
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION guardian_fulfilment_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.event_pk <> OLD.event_pk OR NEW.payment_id <> OLD.payment_id
        OR NEW.provider <> OLD.provider OR NEW.created_at <> OLD.created_at
        OR NEW.idempotency_key <> OLD.idempotency_key THEN
        RAISE EXCEPTION 'fulfilment %: identity columns are immutable', OLD.id USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.state = OLD.state THEN
        IF NEW.attempt <> OLD.attempt THEN
            RAISE EXCEPTION 'fulfilment %: attempt changes only when dispatching starts', OLD.id USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF NOT (OLD.state, NEW.state) IN (
        ('pending', 'dispatching'),
        ('dispatching', 'fulfilled'),
        ('dispatching', 'needs_reconciliation'),
        ('dispatching', 'failed'),
        ('dispatching', 'pending'),
        ('needs_reconciliation', 'fulfilled'),
        ('needs_reconciliation', 'pending'),
        ('needs_reconciliation', 'cancelled'),
        ('needs_reconciliation', 'failed'),
        ('cancelled', 'needs_reconciliation')
    ) THEN
        RAISE EXCEPTION 'fulfilment %: illegal transition % -> %', OLD.id, OLD.state, NEW.state USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.state = 'dispatching' THEN
        IF NEW.attempt <> OLD.attempt + 1 THEN
            RAISE EXCEPTION 'fulfilment %: dispatching must take attempt %', OLD.id, OLD.attempt + 1 USING ERRCODE = 'check_violation';
        END IF;
    ELSIF NEW.attempt <> OLD.attempt THEN
        RAISE EXCEPTION 'fulfilment %: attempt changes only when dispatching starts', OLD.id USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.state = 'needs_reconciliation' THEN
        NEW.checks := 0;
        NEW.next_check_at := NULL;
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
DROP FUNCTION guardian_revoke_key(text, text, bigint);
-- Revocations cannot go back into a schema without them, and their log is
-- append-only: with any recorded, this fails. Keep them.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM fulfilment WHERE action = 'revoke') THEN
        RAISE EXCEPTION 'revocations are recorded: a schema without them cannot hold them';
    END IF;
END;
$$;
-- +goose StatementEnd
DROP INDEX fulfilment_one_per_payment;
CREATE UNIQUE INDEX fulfilment_one_per_payment ON fulfilment (provider, payment_id)
    WHERE state <> 'failed';
DROP INDEX fulfilment_revocations;
ALTER TABLE fulfilment DROP COLUMN action;
DROP INDEX webhook_event_reverses;
ALTER TABLE webhook_event DROP COLUMN reverses;
ALTER TABLE webhook_event DROP COLUMN reversal;
