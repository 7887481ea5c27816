-- +goose Up
-- The moving row carries its payment and its action's name too (issue 36;
-- after migration 00050).
--
-- Two readers read many moving rows for those columns, which since 00050
-- were on the identity alone:
-- - Each action's backlog (db.GetStats: the overview, /api/v1/stats and
--   the metrics' per-action gauges) counts the live rows by state and
--   action. It read each one's name from its identity by id: with 75,914
--   payments pending, the overview took 200 ms (128 ms now, with 79,428).
-- - The sweep's round over the fulfilments settled in its window
--   (db.CreateRevocationsSettledSince) hashes them by payment against the
--   reversals. The planner found their payments by probing, for every
--   reversal stored, its payment's identity and then its moving row:
--   5.0 s a round at ten million payments, where the one table took
--   63 to 111 ms.
-- Both now read fulfilment_move alone. The copies never change, like
-- those of created_at and action beside them, and both guards refuse it;
-- no index of the moving row holds them, so a move still writes no index
-- keyed by the payment.
--
-- The copies are made by rewriting fulfilment_move once, as ALTER TABLE
-- does: a fresh table and fresh indexes, where an UPDATE of every row
-- would leave each of them twice its size. The migration holds the
-- moving rows locked meanwhile (docs/deployment.md, "Upgrading to
-- migration 00051").

ALTER TABLE fulfilment_move ADD COLUMN provider text NOT NULL DEFAULT '',
    ADD COLUMN payment_id text COLLATE "C" NOT NULL DEFAULT '',
    ADD COLUMN action_name text NOT NULL DEFAULT '';
-- +goose StatementBegin
CREATE FUNCTION pg_temp.guardian_identity_of(uuid) RETURNS fulfilment_identity LANGUAGE sql STABLE AS $$
    SELECT * FROM fulfilment_identity WHERE id = $1
$$;
-- +goose StatementEnd
ALTER TABLE fulfilment_move
    ALTER COLUMN provider DROP DEFAULT, ALTER COLUMN provider TYPE text USING (pg_temp.guardian_identity_of(id)).provider,
    ALTER COLUMN payment_id DROP DEFAULT, ALTER COLUMN payment_id TYPE text COLLATE "C" USING (pg_temp.guardian_identity_of(id)).payment_id,
    ALTER COLUMN action_name DROP DEFAULT, ALTER COLUMN action_name TYPE text USING (pg_temp.guardian_identity_of(id)).action_name;
DROP FUNCTION pg_temp.guardian_identity_of(uuid);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION guardian_fulfilment_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.created_at <> OLD.created_at OR NEW.action <> OLD.action
        OR NEW.provider <> OLD.provider OR NEW.payment_id <> OLD.payment_id OR NEW.action_name <> OLD.action_name THEN
        RAISE EXCEPTION 'fulfilment %: identity columns are immutable', OLD.id USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.state = OLD.state THEN
        IF NEW.attempt <> OLD.attempt THEN
            RAISE EXCEPTION 'fulfilment %: attempt changes only when dispatching starts', OLD.id USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF NOT guardian_transition_allowed(OLD.state, NEW.state) THEN
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
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION guardian_fulfilment_identity_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.event_pk <> OLD.event_pk OR NEW.payment_id <> OLD.payment_id
        OR NEW.provider <> OLD.provider OR NEW.created_at <> OLD.created_at
        OR NEW.idempotency_key <> OLD.idempotency_key OR NEW.action <> OLD.action
        OR NEW.action_name <> OLD.action_name THEN
        RAISE EXCEPTION 'fulfilment %: identity columns are immutable', OLD.id USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.failed <> OLD.failed AND (OLD.failed OR NOT EXISTS (
        SELECT 1 FROM fulfilment_move m WHERE m.id = NEW.id AND m.state = 'failed')) THEN
        RAISE EXCEPTION 'fulfilment %: failed follows the state, once', OLD.id USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION guardian_fulfilment_view_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    m fulfilment_move;
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM fulfilment_identity WHERE id = OLD.id;
        RETURN OLD;
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO fulfilment_identity (id, event_pk, provider, payment_id, created_at, idempotency_key, action, action_name, failed)
        VALUES (NEW.id, NEW.event_pk, NEW.provider, NEW.payment_id, NEW.created_at, NEW.idempotency_key, NEW.action,
                NEW.action_name, NEW.state IS NOT DISTINCT FROM 'failed');
        INSERT INTO fulfilment_move (id, state, attempt, updated_at, dispatched_at, checks, next_check_at, deadline,
                                     claim_token, claimant, call_outcome, created_at, action, provider, payment_id, action_name)
        VALUES (NEW.id, NEW.state, NEW.attempt, NEW.updated_at, NEW.dispatched_at, NEW.checks, NEW.next_check_at,
                NEW.deadline, NEW.claim_token, NEW.claimant, NEW.call_outcome, NEW.created_at, NEW.action,
                NEW.provider, NEW.payment_id, NEW.action_name)
        RETURNING * INTO m;
    ELSE
        IF (NEW.id, NEW.event_pk, NEW.provider, NEW.payment_id, NEW.created_at, NEW.idempotency_key, NEW.action, NEW.action_name)
            IS DISTINCT FROM (OLD.id, OLD.event_pk, OLD.provider, OLD.payment_id, OLD.created_at, OLD.idempotency_key, OLD.action, OLD.action_name) THEN
            RAISE EXCEPTION 'fulfilment %: identity columns are immutable', OLD.id USING ERRCODE = 'check_violation';
        END IF;
        UPDATE fulfilment_move SET state = NEW.state, attempt = NEW.attempt, updated_at = NEW.updated_at,
            dispatched_at = NEW.dispatched_at, checks = NEW.checks, next_check_at = NEW.next_check_at,
            deadline = NEW.deadline, claim_token = NEW.claim_token, claimant = NEW.claimant, call_outcome = NEW.call_outcome
        WHERE id = OLD.id
        RETURNING * INTO m;
    END IF;
    NEW.state := m.state;
    NEW.attempt := m.attempt;
    NEW.updated_at := m.updated_at;
    NEW.checks := m.checks;
    NEW.next_check_at := m.next_check_at;
    NEW.failed := m.state = 'failed';
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION guardian_fulfilment_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.created_at <> OLD.created_at OR NEW.action <> OLD.action THEN
        RAISE EXCEPTION 'fulfilment %: identity columns are immutable', OLD.id USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.state = OLD.state THEN
        IF NEW.attempt <> OLD.attempt THEN
            RAISE EXCEPTION 'fulfilment %: attempt changes only when dispatching starts', OLD.id USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF NOT guardian_transition_allowed(OLD.state, NEW.state) THEN
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
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION guardian_fulfilment_identity_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.event_pk <> OLD.event_pk OR NEW.payment_id <> OLD.payment_id
        OR NEW.provider <> OLD.provider OR NEW.created_at <> OLD.created_at
        OR NEW.idempotency_key <> OLD.idempotency_key OR NEW.action <> OLD.action THEN
        RAISE EXCEPTION 'fulfilment %: identity columns are immutable', OLD.id USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.failed <> OLD.failed AND (OLD.failed OR NOT EXISTS (
        SELECT 1 FROM fulfilment_move m WHERE m.id = NEW.id AND m.state = 'failed')) THEN
        RAISE EXCEPTION 'fulfilment %: failed follows the state, once', OLD.id USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION guardian_fulfilment_view_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    m fulfilment_move;
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM fulfilment_identity WHERE id = OLD.id;
        RETURN OLD;
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO fulfilment_identity (id, event_pk, provider, payment_id, created_at, idempotency_key, action, action_name, failed)
        VALUES (NEW.id, NEW.event_pk, NEW.provider, NEW.payment_id, NEW.created_at, NEW.idempotency_key, NEW.action,
                NEW.action_name, NEW.state IS NOT DISTINCT FROM 'failed');
        INSERT INTO fulfilment_move (id, state, attempt, updated_at, dispatched_at, checks, next_check_at, deadline,
                                     claim_token, claimant, call_outcome, created_at, action)
        VALUES (NEW.id, NEW.state, NEW.attempt, NEW.updated_at, NEW.dispatched_at, NEW.checks, NEW.next_check_at,
                NEW.deadline, NEW.claim_token, NEW.claimant, NEW.call_outcome, NEW.created_at, NEW.action)
        RETURNING * INTO m;
    ELSE
        IF (NEW.id, NEW.event_pk, NEW.provider, NEW.payment_id, NEW.created_at, NEW.idempotency_key, NEW.action, NEW.action_name)
            IS DISTINCT FROM (OLD.id, OLD.event_pk, OLD.provider, OLD.payment_id, OLD.created_at, OLD.idempotency_key, OLD.action, OLD.action_name) THEN
            RAISE EXCEPTION 'fulfilment %: identity columns are immutable', OLD.id USING ERRCODE = 'check_violation';
        END IF;
        UPDATE fulfilment_move SET state = NEW.state, attempt = NEW.attempt, updated_at = NEW.updated_at,
            dispatched_at = NEW.dispatched_at, checks = NEW.checks, next_check_at = NEW.next_check_at,
            deadline = NEW.deadline, claim_token = NEW.claim_token, claimant = NEW.claimant, call_outcome = NEW.call_outcome
        WHERE id = OLD.id
        RETURNING * INTO m;
    END IF;
    NEW.state := m.state;
    NEW.attempt := m.attempt;
    NEW.updated_at := m.updated_at;
    NEW.checks := m.checks;
    NEW.next_check_at := m.next_check_at;
    NEW.failed := m.state = 'failed';
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
ALTER TABLE fulfilment_move DROP COLUMN provider, DROP COLUMN payment_id, DROP COLUMN action_name;
