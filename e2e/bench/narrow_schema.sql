-- The narrow row, as `-only moving` measures it (e2e/bench/moving.go): the
-- state a dispatch moves (state, attempt, claim, deadline, outcome) in a
-- table of its own, so that moving it never writes an index of the wide
-- row, the one keyed by the payment above all. Applied to a copy of a
-- migrated (and perhaps filled) database; not a migration.
--
-- The wide row keeps its identity and history: event, provider, payment,
-- action, key, created_at, and its two listing indexes. Its state column
-- stays as it was at birth, only for the one-per-action index's predicate:
-- a real design would give that index a column that moves only on failure
-- (rare, so a wide update then costs nothing here). The narrow row takes
-- the three indexes that hold the state, keyed by it and by time, and the
-- guard and the counts' trigger follow the state to it.
CREATE TABLE fulfilment_move (
    id            uuid PRIMARY KEY REFERENCES fulfilment (id),
    action        text NOT NULL,
    state         text NOT NULL DEFAULT 'pending',
    attempt       integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    dispatched_at timestamptz,
    deadline      timestamptz,
    claim_token   text,
    claimant      text,
    call_outcome  text,
    CHECK (state IN ('pending', 'dispatching', 'fulfilled', 'needs_reconciliation', 'failed', 'cancelled')),
    CHECK (call_outcome IN ('unknown', 'done', 'not_sent', 'declined', 'not_delivered', 'refused'))
);

INSERT INTO fulfilment_move (id, action, state, attempt, created_at, updated_at, dispatched_at, deadline, claim_token, claimant, call_outcome)
SELECT id, action, state, attempt, created_at, updated_at, dispatched_at, deadline, claim_token, claimant, call_outcome
FROM fulfilment ORDER BY id;

CREATE INDEX fulfilment_move_state_created ON fulfilment_move (state, created_at, id);
CREATE INDEX fulfilment_move_state_updated ON fulfilment_move (state, updated_at);
CREATE INDEX fulfilment_move_revocations ON fulfilment_move (state) WHERE action = 'revoke';
DROP INDEX fulfilment_state_created, fulfilment_state_idx, fulfilment_revocations;

CREATE FUNCTION bench_move_guard() RETURNS trigger LANGUAGE plpgsql AS $$
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
    NEW.updated_at := now();
    RETURN NEW;
END;
$$;

CREATE TRIGGER fulfilment_move_guard BEFORE UPDATE ON fulfilment_move
    FOR EACH ROW EXECUTE FUNCTION bench_move_guard();
CREATE TRIGGER fulfilment_move_change_update AFTER UPDATE OF state ON fulfilment_move
    FOR EACH ROW WHEN (OLD.state <> NEW.state AND (OLD.state IN ('fulfilled', 'failed', 'cancelled', 'dispatching') OR NEW.state IN ('fulfilled', 'failed', 'cancelled')))
    EXECUTE FUNCTION guardian_fulfilment_change();
-- The wide row no longer moves: its update triggers would never fire.
DROP TRIGGER fulfilment_change_update ON fulfilment;
