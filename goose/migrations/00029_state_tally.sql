-- +goose Up
-- Counts kept as the rows change rather than counted by reading them
-- (issue 23): the settled states (fulfilled, failed, cancelled), which
-- grow with all history, and the dispatch outcomes per minute, which the
-- overview shows for the last hour. Counting fulfilled meant reading the
-- whole table, and every process did it when it started and every 5
-- minutes after (the metrics' gauges): at 10 million payments a 6 GB scan
-- on top of intake in each new process. The hour's outcomes were read one
-- by one, as many as the hour dispatched. The states a payment passes
-- through (pending, dispatching, needs_reconciliation) stay small and are
-- still counted through fulfilment_state_idx.
--
-- fulfilment_change gets a row for every move into or out of a settled
-- state and every move out of dispatching (an outcome), appended by a
-- trigger in the transaction that moved the fulfilment: no row lock, so
-- concurrent outcomes never wait on each other. The leader folds the
-- changes into fulfilment_tally and dispatch_outcome_minute
-- (db.FoldTally, every few seconds). A count is the folded rows plus the
-- changes not yet folded, read in one statement and so one snapshot:
-- exact, and at most a fold interval of changes to read.
CREATE TABLE fulfilment_tally (
    state  text NOT NULL CHECK (state IN ('fulfilled', 'failed', 'cancelled')),
    action text NOT NULL,
    n      bigint NOT NULL,
    PRIMARY KEY (state, action)
);

CREATE TABLE dispatch_outcome_minute (
    minute   timestamptz NOT NULL,
    to_state text NOT NULL,
    n        bigint NOT NULL,
    PRIMARY KEY (minute, to_state)
);

-- from_state NULL: a row made in to_state; to_state NULL: a row deleted.
-- at is the moving transaction's time, which its transition row carries
-- too.
CREATE TABLE fulfilment_change (
    from_state text,
    to_state   text,
    action     text NOT NULL,
    at         timestamptz NOT NULL DEFAULT now()
);

-- +goose StatementBegin
CREATE FUNCTION guardian_fulfilment_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO fulfilment_change (from_state, to_state, action) VALUES (NULL, NEW.state, NEW.action);
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO fulfilment_change (from_state, to_state, action) VALUES (OLD.state, NEW.state, NEW.action);
    ELSE
        INSERT INTO fulfilment_change (from_state, to_state, action) VALUES (OLD.state, NULL, OLD.action);
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION guardian_fulfilment_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM fulfilment_tally;
    DELETE FROM dispatch_outcome_minute;
    DELETE FROM fulfilment_change;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- No change may slip between the counts below and the triggers: writers
-- wait for this migration's commit (the count reads the table once).
LOCK TABLE fulfilment IN SHARE MODE;

-- The WHEN clauses keep intake and claims free of the trigger: a new row
-- is pending, and pending -> dispatching is neither settled nor an outcome.
-- The action never changes (guardian_fulfilment_guard keeps a row's
-- identity); a change carries the new row's.
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
CREATE TRIGGER fulfilment_truncated AFTER TRUNCATE ON fulfilment FOR EACH STATEMENT
    EXECUTE FUNCTION guardian_fulfilment_truncated();

INSERT INTO fulfilment_tally (state, action, n)
SELECT state, action, count(*) FROM fulfilment
WHERE state IN ('fulfilled', 'failed', 'cancelled')
GROUP BY state, action;

-- The last day's outcomes, from the transition log.
INSERT INTO dispatch_outcome_minute (minute, to_state, n)
SELECT date_trunc('minute', created_at), to_state, count(*) FROM fulfilment_transition
WHERE from_state = 'dispatching' AND created_at >= now() - interval '1 day'
GROUP BY 1, 2;

-- The overview read the hour's outcomes through this index; nothing else
-- does, and every outcome wrote it.
DROP INDEX IF EXISTS fulfilment_transition_outcome;

-- +goose Down
CREATE INDEX IF NOT EXISTS fulfilment_transition_outcome ON fulfilment_transition (created_at) INCLUDE (to_state)
    WHERE from_state = 'dispatching';
DROP TRIGGER fulfilment_truncated ON fulfilment;
DROP TRIGGER fulfilment_change_delete ON fulfilment;
DROP TRIGGER fulfilment_change_update ON fulfilment;
DROP TRIGGER fulfilment_change_insert ON fulfilment;
DROP FUNCTION guardian_fulfilment_truncated();
DROP FUNCTION guardian_fulfilment_change();
DROP TABLE fulfilment_change;
DROP TABLE dispatch_outcome_minute;
DROP TABLE fulfilment_tally;
