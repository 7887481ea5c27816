-- +goose Up
-- A cancelled fulfilment keeps its payment: the parked call it was cancelled
-- over may have acted, so neither a replay nor a later event of another type
-- may send the payment again under a new key (invariant 3). Only failed (the
-- connector refused; nothing was done) frees a payment. Reopening a cancelled
-- fulfilment is an operator's audited move back to needs_reconciliation, on
-- the same row and Idempotency-Key.

-- +goose StatementBegin
DO $$
DECLARE
    taken text;
BEGIN
    SELECT string_agg(provider || '/' || payment_id, ', ') INTO taken FROM (
        SELECT provider, payment_id FROM fulfilment WHERE state <> 'failed'
        GROUP BY provider, payment_id HAVING count(*) > 1 LIMIT 20
    ) dup;
    IF taken IS NOT NULL THEN
        RAISE EXCEPTION 'payments with a cancelled fulfilment and a later one exist (%): each may have been acted on twice; settle them with the receiver and mark the extra rows failed by hand before migrating', taken
            USING ERRCODE = 'unique_violation';
    END IF;
END;
$$;
-- +goose StatementEnd

DROP INDEX fulfilment_one_per_payment;
CREATE UNIQUE INDEX fulfilment_one_per_payment ON fulfilment (provider, payment_id)
    WHERE state <> 'failed';

DROP INDEX fulfilment_one_per_event;
CREATE UNIQUE INDEX fulfilment_one_per_event ON fulfilment (event_pk)
    WHERE state <> 'failed';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION guardian_fulfilment_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.event_pk <> OLD.event_pk OR NEW.payment_id <> OLD.payment_id
        OR NEW.provider <> OLD.provider OR NEW.created_at <> OLD.created_at THEN
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
    -- A newly parked row gets its first lookup after the grace, whatever
    -- the backoff of an earlier parking was.
    IF NEW.state = 'needs_reconciliation' THEN
        NEW.checks := 0;
        NEW.next_check_at := NULL;
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

-- The sweep finds pending fulfilments without a live dispatch job (retries
-- exhausted, a job cancelled or deleted in River UI, a fetch whose answer was
-- lost): it looks jobs up by the fulfilment they dispatch.
CREATE INDEX river_job_guardian_dispatch_fulfilment ON river_job ((args ->> 'fulfilment_id'))
    WHERE kind = 'guardian_dispatch';

-- The epoch scopes the duplicate filter's Redis marks to this database: a
-- restored or failed-over database gets a new one (`guardian epoch rotate`),
-- and two deployments sharing a Redis never share marks.
CREATE TABLE guardian_epoch (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    epoch      text        NOT NULL DEFAULT replace(gen_random_uuid()::text, '-', ''),
    rotated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO guardian_epoch DEFAULT VALUES;

-- +goose Down
DROP TABLE guardian_epoch;
DROP INDEX river_job_guardian_dispatch_fulfilment;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION guardian_fulfilment_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.event_pk <> OLD.event_pk OR NEW.payment_id <> OLD.payment_id
        OR NEW.provider <> OLD.provider OR NEW.created_at <> OLD.created_at THEN
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
        ('needs_reconciliation', 'cancelled')
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
    -- A newly parked row gets its first lookup after the grace, whatever
    -- the backoff of an earlier parking was.
    IF NEW.state = 'needs_reconciliation' THEN
        NEW.checks := 0;
        NEW.next_check_at := NULL;
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

DROP INDEX fulfilment_one_per_event;
CREATE UNIQUE INDEX fulfilment_one_per_event ON fulfilment (event_pk)
    WHERE state NOT IN ('failed', 'cancelled');

DROP INDEX fulfilment_one_per_payment;
CREATE UNIQUE INDEX fulfilment_one_per_payment ON fulfilment (provider, payment_id)
    WHERE state NOT IN ('failed', 'cancelled');
