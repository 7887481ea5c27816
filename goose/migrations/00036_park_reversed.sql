-- +goose Up
-- A pending fulfilment of a payment taken back may be parked (issue 32):
-- Guardian's rows say nothing went out, but a restored database forgets
-- what did, so with a lookup the receiver is asked by the payment's key
-- before the fulfilment is cancelled (done: fulfilled and taken back; not
-- done: cancelled). The guard gains pending -> needs_reconciliation; no
-- attempt is taken, since no call is made.
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
        ('pending', 'needs_reconciliation'),
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
-- Rows parked this way stay parked: needs_reconciliation is theirs to leave
-- by facts under the older guard too.
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
