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

-- The narrow row's guard is Guardian's own (guardian_fulfilment_guard),
-- made from its source as the database holds it: the narrow row's
-- identity is its id, created_at and action, and it has no checks to
-- reset (they stay on the wide row). Each edit must apply: a guard the
-- edits no longer fit stops the comparison.
DO $do$
DECLARE
    guard text := (SELECT prosrc FROM pg_proc WHERE proname = 'guardian_fulfilment_guard');
    edited text;
BEGIN
    edited := regexp_replace(guard, 'IF NEW\.id <> OLD\.id OR .*?THEN',
        'IF NEW.id <> OLD.id OR NEW.created_at <> OLD.created_at OR NEW.action <> OLD.action THEN');
    IF edited = guard THEN
        RAISE EXCEPTION 'narrow_schema.sql: the guard''s identity check no longer fits the edit';
    END IF;
    guard := edited;
    edited := regexp_replace(guard, 'IF NEW\.state = ''needs_reconciliation'' THEN.*?END IF;', '');
    IF edited = guard THEN
        RAISE EXCEPTION 'narrow_schema.sql: the guard''s reset of checks no longer fits the edit';
    END IF;
    EXECUTE format('CREATE FUNCTION bench_move_guard() RETURNS trigger LANGUAGE plpgsql AS %L', edited);
    -- The counts' trigger on a move, as the wide row has it, moved to the
    -- narrow row: the wide row no longer moves.
    edited := (SELECT replace(replace(pg_get_triggerdef(oid), 'TRIGGER fulfilment_change_update ', 'TRIGGER fulfilment_move_change_update '),
        ' ON public.fulfilment ', ' ON public.fulfilment_move ')
        FROM pg_trigger WHERE tgname = 'fulfilment_change_update' AND tgrelid = 'fulfilment'::regclass);
    IF edited NOT LIKE '%ON public.fulfilment_move %' THEN
        RAISE EXCEPTION 'narrow_schema.sql: the counts'' trigger no longer fits the edit: %', edited;
    END IF;
    EXECUTE edited;
    DROP TRIGGER fulfilment_change_update ON fulfilment;
END;
$do$;

CREATE TRIGGER fulfilment_move_guard BEFORE UPDATE ON fulfilment_move
    FOR EACH ROW EXECUTE FUNCTION bench_move_guard();
