-- +goose Up
-- The receiver's contract (docs/design.md, "The receiver's contract").
--
-- Keys derive from the payment. A fulfilment's Idempotency-Key was its
-- random row id, so a restored database (or a second deployment in front of
-- the same receiver) made a new row with a new key for a payment that had
-- already acted, and the receiver acted again. A new row's key is now
-- guardian_idempotency_key(provider, payment_id, n), where n counts the
-- payment's earlier failed fulfilments (each one a key the receiver
-- declined, for good): the same payment names the same key in any database
-- that holds the same declines. Rows made before this migration keep the
-- key they were sent under (their id).
--
-- The key is a hash so that any payment id (a Standard Webhooks sender's
-- ids are the merchant's own strings) gives a short key that is safe in a
-- URL path. The provider has no ':' (it is a route name) and n is digits,
-- so the hashed text is unambiguous.

-- +goose StatementBegin
CREATE FUNCTION guardian_idempotency_key(provider text, payment_id text, declined bigint) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT 'gk1_' || left(encode(sha256(convert_to('guardian/v1:' || provider || ':' || declined || ':' || payment_id, 'UTF8')), 'hex'), 40)
$$;
-- +goose StatementEnd

ALTER TABLE fulfilment ADD COLUMN idempotency_key text;
UPDATE fulfilment SET idempotency_key = id::text;
ALTER TABLE fulfilment ALTER COLUMN idempotency_key SET NOT NULL;
-- Keys are not unique across rows, on purpose: two live rows of one payment
-- are impossible (fulfilment_one_per_payment), and a new row that counted
-- its payment's declines while the earlier row was still failing reuses
-- that row's key, which the receiver keeps declined (or, after a refusal
-- and a signed "not done", never acted on): one act per key either way. A
-- unique index here would turn a concurrent retry of one failed payment
-- into an error instead of the payment index's quiet "already taken".
-- Operators and receivers name fulfilments by key: look them up by it.
CREATE INDEX fulfilment_idempotency_key ON fulfilment (idempotency_key);
-- Counting a payment's declined keys at every insert reads this small index
-- (failed rows only), never the payment's whole history.
CREATE INDEX fulfilment_payment_failed ON fulfilment (provider, payment_id) WHERE state = 'failed';

-- Each claim stores its own deadline: the moment after which its call
-- cannot be in flight, by the claimant's connector timeout. Readers (the
-- sweep, a job finding the row dispatching, an operator's resolution, the
-- reconciler) read it from the row, not from their own configuration, so a
-- rollout that raises the timeout never lets an old process judge a new
-- process's call dead. NULL for claims made before this migration: readers
-- fall back to their own window for those.
ALTER TABLE fulfilment ADD COLUMN deadline timestamptz;

-- A lookup can answer "in progress" (ask again later) and "declined" (the
-- receiver's word that the key did nothing, for good).
ALTER TABLE fulfilment_check DROP CONSTRAINT fulfilment_check_answer_check;
ALTER TABLE fulfilment_check ADD CONSTRAINT fulfilment_check_answer_check
    CHECK (answer IN ('done', 'not_done', 'cannot_tell', 'in_progress', 'declined'));

-- needs_reconciliation -> failed: a parked row whose key the receiver says,
-- signed, it declined (or did nothing for, after refusing it) frees its
-- payment. The guard is otherwise unchanged.
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

-- +goose Down
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
    IF NEW.state = 'needs_reconciliation' THEN
        NEW.checks := 0;
        NEW.next_check_at := NULL;
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
ALTER TABLE fulfilment_check DROP CONSTRAINT fulfilment_check_answer_check;
-- NOT VALID: the log is append-only, and rows with the newer answers stay.
ALTER TABLE fulfilment_check ADD CONSTRAINT fulfilment_check_answer_check
    CHECK (answer IN ('done', 'not_done', 'cannot_tell')) NOT VALID;
ALTER TABLE fulfilment DROP COLUMN deadline;
DROP INDEX fulfilment_payment_failed;
DROP INDEX fulfilment_idempotency_key;
ALTER TABLE fulfilment DROP COLUMN idempotency_key;
DROP FUNCTION guardian_idempotency_key(text, text, bigint);
