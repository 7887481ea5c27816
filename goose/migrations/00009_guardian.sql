-- Guardian's tables: received events, one fulfilment per payment, and the
-- append-only log of every fulfilment transition.

-- +goose Up
CREATE TABLE webhook_event (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider      text        NOT NULL CHECK (provider <> ''),
    event_id      text        NOT NULL CHECK (event_id <> ''),
    event_type    text        NOT NULL,
    -- payment_id is set when the event type fulfils a payment.
    payment_id    text,
    payload       jsonb       NOT NULL,
    deliveries    integer     NOT NULL DEFAULT 1 CHECK (deliveries >= 1),
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT webhook_event_provider_event_id_key UNIQUE (provider, event_id)
);

CREATE INDEX webhook_event_payment_idx ON webhook_event (provider, payment_id) WHERE payment_id IS NOT NULL;

-- The fulfilment id is a random UUID because it is the Idempotency-Key the
-- connector sees: it must never repeat, also across databases.
CREATE TABLE fulfilment (
    id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    event_pk      bigint      NOT NULL REFERENCES webhook_event (id),
    provider      text        NOT NULL,
    payment_id    text        NOT NULL CHECK (payment_id <> ''),
    state         text        NOT NULL DEFAULT 'pending' CONSTRAINT fulfilment_state_check CHECK (
        state IN ('pending', 'dispatching', 'fulfilled', 'needs_reconciliation', 'failed', 'cancelled')
    ),
    attempt       integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    dispatched_at timestamptz,
    -- The reconciler's lookups: how many so far, and when the next is due.
    checks        integer     NOT NULL DEFAULT 0 CHECK (checks >= 0),
    next_check_at timestamptz
);

-- One live fulfilment per event. A failed or cancelled one frees the event
-- for a replay.
CREATE UNIQUE INDEX fulfilment_one_per_event ON fulfilment (event_pk)
    WHERE state NOT IN ('failed', 'cancelled');

-- Invariant 1: one live fulfilment per payment. failed (nothing was done) and
-- cancelled (an operator said so) free the payment for a later event.
CREATE UNIQUE INDEX fulfilment_one_per_payment ON fulfilment (provider, payment_id)
    WHERE state NOT IN ('failed', 'cancelled');

CREATE INDEX fulfilment_state_idx ON fulfilment (state, updated_at);

CREATE TABLE fulfilment_transition (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    fulfilment_id  uuid        NOT NULL REFERENCES fulfilment (id),
    from_state     text,
    to_state       text        NOT NULL,
    attempt        integer     NOT NULL,
    actor          text        NOT NULL CHECK (actor <> ''),
    reason         text        NOT NULL CHECK (reason <> ''),
    evidence       jsonb       NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX fulfilment_transition_fulfilment_idx ON fulfilment_transition (fulfilment_id, id);

-- What each reconciliation lookup answered, including "cannot tell": the
-- evidence an operator reads before resolving by hand. Append-only.
CREATE TABLE fulfilment_check (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    fulfilment_id  uuid        NOT NULL REFERENCES fulfilment (id),
    attempt        integer     NOT NULL,
    actor          text        NOT NULL CHECK (actor <> ''),
    answer         text        NOT NULL CHECK (answer IN ('done', 'not_done', 'cannot_tell')),
    evidence       jsonb       NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX fulfilment_check_fulfilment_idx ON fulfilment_check (fulfilment_id, id);

-- +goose StatementBegin
-- Illegal transitions are impossible in SQL, not only in Go: this table is
-- the twin of app/state's transition table, and a test keeps them equal.
CREATE FUNCTION guardian_fulfilment_guard() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE TRIGGER fulfilment_guard BEFORE UPDATE ON fulfilment
    FOR EACH ROW EXECUTE FUNCTION guardian_fulfilment_guard();

-- +goose StatementBegin
CREATE FUNCTION guardian_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only', TG_TABLE_NAME USING ERRCODE = 'insufficient_privilege';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER fulfilment_transition_append_only BEFORE UPDATE OR DELETE ON fulfilment_transition
    FOR EACH ROW EXECUTE FUNCTION guardian_append_only();

CREATE TRIGGER fulfilment_check_append_only BEFORE UPDATE OR DELETE ON fulfilment_check
    FOR EACH ROW EXECUTE FUNCTION guardian_append_only();

-- +goose Down
DROP TABLE fulfilment_check;
DROP TABLE fulfilment_transition;
DROP FUNCTION guardian_append_only();
DROP TABLE fulfilment;
DROP FUNCTION guardian_fulfilment_guard();
DROP TABLE webhook_event;
