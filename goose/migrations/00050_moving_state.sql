-- +goose Up
-- The moving state in a narrow row of its own (issue 36; docs/design.md,
-- "Bounded growth"; docs/performance.md, "The moving state in a row of its own").
--
-- A fulfilment's identity (its event, payment, action, key, birth) never
-- changes; its state (state, attempt, claim, deadline, outcome, checks)
-- moves two to three times a payment. In one row, every move was a
-- non-HOT update, since the state is indexed, and so wrote an entry into
-- each of the row's nine indexes, among them fulfilment_one_per_action,
-- keyed by the payment: a leaf at random in an index as large as the
-- history, for every claim and every outcome.
--
-- Now the identity is fulfilment_identity, written once, and the moving
-- state is fulfilment_move, one row per fulfilment under the same id,
-- whose indexes are keyed by the id (time-ordered, uuid7) and by state
-- and time: a move writes no index keyed by the payment. The one live
-- fulfilment per action (invariant 1) is held on the identity through
-- failed, which turns true once, when the row fails (a failed row is
-- final), and is kept by a trigger on the move.
--
-- fulfilment is a view of the two joined, as every reader had the table:
-- reads are unchanged. Guardian's own writes address the two tables; the
-- view takes inserts, updates and deletes too (for an operator's script,
-- and the tests' fixtures), row by row, through the same guards.
--
-- The move carries copies of created_at and action, which never change:
-- the state's listing index orders by created_at, and the revocations'
-- index is partial on action. Statements that use those indexes address
-- fulfilment_move by name. The view joins on the id alone: joined on the
-- copies as well, the planner multiplied the three equalities'
-- selectivities and expected a handful of rows from a million, and read
-- both tables whole into a hash for an operator's listing.
--
-- The migration holds fulfilment locked while it copies the moving
-- columns: 7.9 s for 1.5 million fulfilments on the bench's VM
-- (docs/deployment.md, "Upgrading to migration 00050"). Webhooks that
-- arrive meanwhile wait, or are redelivered by their providers; none is
-- lost. The identity's rows keep the dropped columns' bytes until
-- something rewrites them (DROP COLUMN does not); new rows carry none.

ALTER TABLE fulfilment RENAME TO fulfilment_identity;
ALTER INDEX fulfilment_pkey RENAME TO fulfilment_identity_pkey;

DROP TRIGGER fulfilment_guard ON fulfilment_identity;
DROP TRIGGER fulfilment_change_insert ON fulfilment_identity;
DROP TRIGGER fulfilment_change_update ON fulfilment_identity;
DROP TRIGGER fulfilment_change_delete ON fulfilment_identity;
DROP TRIGGER fulfilment_truncated ON fulfilment_identity;

CREATE TABLE fulfilment_move (
    id uuid NOT NULL,
    state text NOT NULL DEFAULT 'pending'
        CONSTRAINT fulfilment_state_check CHECK (state IN ('pending', 'dispatching', 'fulfilled', 'needs_reconciliation', 'failed', 'cancelled')),
    attempt integer NOT NULL DEFAULT 0 CONSTRAINT fulfilment_attempt_check CHECK (attempt >= 0),
    updated_at timestamptz NOT NULL DEFAULT now(),
    dispatched_at timestamptz,
    checks integer NOT NULL DEFAULT 0 CONSTRAINT fulfilment_checks_check CHECK (checks >= 0),
    next_check_at timestamptz,
    deadline timestamptz,
    claim_token text,
    claimant text,
    call_outcome text
        CONSTRAINT fulfilment_call_outcome_check CHECK (call_outcome IN ('unknown', 'done', 'not_sent', 'declined', 'not_delivered', 'refused')),
    -- Copies of the identity's, for the indexes below.
    created_at timestamptz NOT NULL,
    action text NOT NULL
);
INSERT INTO fulfilment_move (id, state, attempt, updated_at, dispatched_at, checks, next_check_at, deadline,
                             claim_token, claimant, call_outcome, created_at, action)
SELECT id, state, attempt, updated_at, dispatched_at, checks, next_check_at, deadline,
       claim_token, claimant, call_outcome, created_at, action
FROM fulfilment_identity;
ALTER TABLE fulfilment_move ADD CONSTRAINT fulfilment_move_pkey PRIMARY KEY (id),
    ADD CONSTRAINT fulfilment_move_id_fkey FOREIGN KEY (id) REFERENCES fulfilment_identity (id) ON DELETE CASCADE;

ALTER TABLE fulfilment_identity ADD COLUMN failed boolean NOT NULL DEFAULT false;
UPDATE fulfilment_identity i SET failed = true FROM fulfilment_move m WHERE m.id = i.id AND m.state = 'failed';

DROP INDEX fulfilment_one_per_action, fulfilment_payment_failed, fulfilment_revocations,
    fulfilment_state_created, fulfilment_state_idx;
ALTER TABLE fulfilment_identity DROP COLUMN state, DROP COLUMN attempt, DROP COLUMN updated_at,
    DROP COLUMN dispatched_at, DROP COLUMN checks, DROP COLUMN next_check_at, DROP COLUMN deadline,
    DROP COLUMN claim_token, DROP COLUMN claimant, DROP COLUMN call_outcome;

-- Invariant 1, per action, as 00039 made it, on the column that moves once.
CREATE UNIQUE INDEX fulfilment_one_per_action ON fulfilment_identity (provider, payment_id, action_name, action)
    WHERE NOT failed;
CREATE INDEX fulfilment_payment_failed ON fulfilment_identity (provider, payment_id) WHERE failed;
CREATE INDEX fulfilment_state_created ON fulfilment_move (state, created_at, id);
CREATE INDEX fulfilment_state_idx ON fulfilment_move (state, updated_at);
CREATE INDEX fulfilment_revocations ON fulfilment_move (state) WHERE action = 'revoke';

CREATE VIEW fulfilment AS
SELECT i.id, i.event_pk, i.provider, i.payment_id, m.state, m.attempt, i.created_at, m.updated_at, m.dispatched_at,
       m.checks, m.next_check_at, i.idempotency_key, m.deadline, i.action, m.claim_token, m.claimant, m.call_outcome,
       i.action_name, i.failed
FROM fulfilment_identity i JOIN fulfilment_move m ON m.id = i.id;
ALTER VIEW fulfilment ALTER COLUMN id SET DEFAULT guardian_uuid7();
ALTER VIEW fulfilment ALTER COLUMN state SET DEFAULT 'pending';
ALTER VIEW fulfilment ALTER COLUMN attempt SET DEFAULT 0;
ALTER VIEW fulfilment ALTER COLUMN created_at SET DEFAULT now();
ALTER VIEW fulfilment ALTER COLUMN updated_at SET DEFAULT now();
ALTER VIEW fulfilment ALTER COLUMN checks SET DEFAULT 0;
ALTER VIEW fulfilment ALTER COLUMN action SET DEFAULT 'fulfil';
ALTER VIEW fulfilment ALTER COLUMN action_name SET DEFAULT 'fulfil';

-- The state machine, as before, on the row that moves.
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

-- The identity never changes but for failed, which turns true once, and
-- only when its move has failed.
CREATE FUNCTION guardian_fulfilment_identity_guard() RETURNS trigger LANGUAGE plpgsql AS $$
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

-- A row that fails frees its action for the next (invariant 1 per action).
CREATE FUNCTION guardian_fulfilment_failed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE fulfilment_identity SET failed = true WHERE id = NEW.id AND NOT failed;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER fulfilment_guard BEFORE UPDATE ON fulfilment_move
    FOR EACH ROW EXECUTE FUNCTION guardian_fulfilment_guard();
CREATE TRIGGER fulfilment_identity_guard BEFORE UPDATE ON fulfilment_identity
    FOR EACH ROW EXECUTE FUNCTION guardian_fulfilment_identity_guard();
CREATE TRIGGER fulfilment_failed_insert AFTER INSERT ON fulfilment_move
    FOR EACH ROW WHEN (NEW.state = 'failed') EXECUTE FUNCTION guardian_fulfilment_failed();
CREATE TRIGGER fulfilment_failed_update AFTER UPDATE OF state ON fulfilment_move
    FOR EACH ROW WHEN (NEW.state = 'failed' AND OLD.state <> 'failed') EXECUTE FUNCTION guardian_fulfilment_failed();
-- The tally's feed (00029), as it was.
CREATE TRIGGER fulfilment_change_insert AFTER INSERT ON fulfilment_move FOR EACH ROW
    WHEN (NEW.state IN ('fulfilled', 'failed', 'cancelled'))
    EXECUTE FUNCTION guardian_fulfilment_change();
CREATE TRIGGER fulfilment_change_update AFTER UPDATE OF state ON fulfilment_move FOR EACH ROW
    WHEN (OLD.state <> NEW.state AND (OLD.state IN ('fulfilled', 'failed', 'cancelled', 'dispatching')
        OR NEW.state IN ('fulfilled', 'failed', 'cancelled')))
    EXECUTE FUNCTION guardian_fulfilment_change();
CREATE TRIGGER fulfilment_change_delete AFTER DELETE ON fulfilment_move FOR EACH ROW
    WHEN (OLD.state IN ('fulfilled', 'failed', 'cancelled'))
    EXECUTE FUNCTION guardian_fulfilment_change();
CREATE TRIGGER fulfilment_truncated AFTER TRUNCATE ON fulfilment_move
    FOR EACH STATEMENT EXECUTE FUNCTION guardian_fulfilment_truncated();

-- The view written to, a row at a time, as the table was.
-- +goose StatementBegin
CREATE FUNCTION guardian_fulfilment_view_write() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE TRIGGER fulfilment_view_write INSTEAD OF INSERT OR UPDATE OR DELETE ON fulfilment
    FOR EACH ROW EXECUTE FUNCTION guardian_fulfilment_view_write();

-- +goose Down
DROP VIEW fulfilment;
DROP FUNCTION guardian_fulfilment_view_write();
ALTER TABLE fulfilment_identity RENAME TO fulfilment;
ALTER INDEX fulfilment_identity_pkey RENAME TO fulfilment_pkey;
DROP TRIGGER fulfilment_identity_guard ON fulfilment;
DROP FUNCTION guardian_fulfilment_identity_guard();
DROP INDEX fulfilment_one_per_action, fulfilment_payment_failed;

ALTER TABLE fulfilment
    ADD COLUMN state text NOT NULL DEFAULT 'pending'
        CONSTRAINT fulfilment_state_check CHECK (state IN ('pending', 'dispatching', 'fulfilled', 'needs_reconciliation', 'failed', 'cancelled')),
    ADD COLUMN attempt integer NOT NULL DEFAULT 0 CONSTRAINT fulfilment_attempt_check CHECK (attempt >= 0),
    ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN dispatched_at timestamptz,
    ADD COLUMN checks integer NOT NULL DEFAULT 0 CONSTRAINT fulfilment_checks_check CHECK (checks >= 0),
    ADD COLUMN next_check_at timestamptz,
    ADD COLUMN deadline timestamptz,
    ADD COLUMN claim_token text,
    ADD COLUMN claimant text,
    ADD COLUMN call_outcome text
        CONSTRAINT fulfilment_call_outcome_check CHECK (call_outcome IN ('unknown', 'done', 'not_sent', 'declined', 'not_delivered', 'refused'));
UPDATE fulfilment f SET state = m.state, attempt = m.attempt, updated_at = m.updated_at, dispatched_at = m.dispatched_at,
    checks = m.checks, next_check_at = m.next_check_at, deadline = m.deadline, claim_token = m.claim_token,
    claimant = m.claimant, call_outcome = m.call_outcome
FROM fulfilment_move m WHERE m.id = f.id;
DROP TABLE fulfilment_move;
DROP FUNCTION guardian_fulfilment_failed();
ALTER TABLE fulfilment DROP COLUMN failed;

CREATE UNIQUE INDEX fulfilment_one_per_action ON fulfilment (provider, payment_id, action_name, action)
    WHERE state <> 'failed';
CREATE INDEX fulfilment_payment_failed ON fulfilment (provider, payment_id) WHERE state = 'failed';
CREATE INDEX fulfilment_state_created ON fulfilment (state, created_at, id);
CREATE INDEX fulfilment_state_idx ON fulfilment (state, updated_at);
CREATE INDEX fulfilment_revocations ON fulfilment (state) WHERE action = 'revoke';

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
CREATE TRIGGER fulfilment_guard BEFORE UPDATE ON fulfilment
    FOR EACH ROW EXECUTE FUNCTION guardian_fulfilment_guard();
CREATE TRIGGER fulfilment_change_insert AFTER INSERT ON fulfilment FOR EACH ROW
    WHEN (NEW.state IN ('fulfilled', 'failed', 'cancelled'))
    EXECUTE FUNCTION guardian_fulfilment_change();
CREATE TRIGGER fulfilment_change_update AFTER UPDATE OF state ON fulfilment FOR EACH ROW
    WHEN (OLD.state <> NEW.state AND (OLD.state IN ('fulfilled', 'failed', 'cancelled', 'dispatching')
        OR NEW.state IN ('fulfilled', 'failed', 'cancelled')))
    EXECUTE FUNCTION guardian_fulfilment_change();
CREATE TRIGGER fulfilment_change_delete AFTER DELETE ON fulfilment FOR EACH ROW
    WHEN (OLD.state IN ('fulfilled', 'failed', 'cancelled'))
    EXECUTE FUNCTION guardian_fulfilment_change();
CREATE TRIGGER fulfilment_truncated AFTER TRUNCATE ON fulfilment
    FOR EACH STATEMENT EXECUTE FUNCTION guardian_fulfilment_truncated();
