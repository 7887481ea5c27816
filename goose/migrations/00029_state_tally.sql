-- +goose Up
-- Counts of the settled states (fulfilled, failed, cancelled), kept as the
-- rows change rather than counted by reading them (issue 23). Those three
-- states grow with all history: counting fulfilled meant reading the whole
-- table, and every process did it when it started and every 5 minutes
-- after (the metrics' gauges). At 10 million payments that was a 6 GB scan
-- on top of intake in each new process. The states a payment passes
-- through (pending, dispatching, needs_reconciliation) stay small and are
-- still counted through fulfilment_state_idx.
--
-- fulfilment_tally holds the counts as of its last fold;
-- fulfilment_tally_change the changes since, one row per fulfilment that
-- entered or left a settled state, appended by triggers in the
-- transaction that moved it (no row lock: concurrent outcomes never wait
-- on each other). A count is the sum of both, read in one statement and so
-- one snapshot: exact. The leader folds the changes into the tally every
-- minute (jobs.TallyWorker), so a read sums the tally's rows and at most a
-- minute of changes.
CREATE TABLE fulfilment_tally (
    state  text NOT NULL CHECK (state IN ('fulfilled', 'failed', 'cancelled')),
    action text NOT NULL,
    n      bigint NOT NULL,
    PRIMARY KEY (state, action)
);

CREATE TABLE fulfilment_tally_change (
    state  text NOT NULL,
    action text NOT NULL,
    n      integer NOT NULL CHECK (n IN (-1, 1))
);

-- +goose StatementBegin
CREATE FUNCTION guardian_tally_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.state IN ('fulfilled', 'failed', 'cancelled') THEN
        INSERT INTO fulfilment_tally_change VALUES (OLD.state, OLD.action, -1);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.state IN ('fulfilled', 'failed', 'cancelled') THEN
        INSERT INTO fulfilment_tally_change VALUES (NEW.state, NEW.action, 1);
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION guardian_tally_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM fulfilment_tally;
    DELETE FROM fulfilment_tally_change;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- No change may slip between the count below and the triggers: writers
-- wait for this migration's commit (the count reads the table once).
LOCK TABLE fulfilment IN SHARE MODE;

-- The WHEN clauses keep intake and claims free of the trigger: a new row
-- is pending, and pending -> dispatching touches no settled state.
CREATE TRIGGER fulfilment_tally_insert AFTER INSERT ON fulfilment FOR EACH ROW
    WHEN (NEW.state IN ('fulfilled', 'failed', 'cancelled'))
    EXECUTE FUNCTION guardian_tally_change();
CREATE TRIGGER fulfilment_tally_update AFTER UPDATE OF state, action ON fulfilment FOR EACH ROW
    WHEN ((OLD.state, OLD.action) IS DISTINCT FROM (NEW.state, NEW.action)
        AND (OLD.state IN ('fulfilled', 'failed', 'cancelled') OR NEW.state IN ('fulfilled', 'failed', 'cancelled')))
    EXECUTE FUNCTION guardian_tally_change();
CREATE TRIGGER fulfilment_tally_delete AFTER DELETE ON fulfilment FOR EACH ROW
    WHEN (OLD.state IN ('fulfilled', 'failed', 'cancelled'))
    EXECUTE FUNCTION guardian_tally_change();
CREATE TRIGGER fulfilment_tally_truncate AFTER TRUNCATE ON fulfilment FOR EACH STATEMENT
    EXECUTE FUNCTION guardian_tally_truncate();

INSERT INTO fulfilment_tally (state, action, n)
SELECT state, action, count(*) FROM fulfilment
WHERE state IN ('fulfilled', 'failed', 'cancelled')
GROUP BY state, action;

-- +goose Down
DROP TRIGGER fulfilment_tally_truncate ON fulfilment;
DROP TRIGGER fulfilment_tally_delete ON fulfilment;
DROP TRIGGER fulfilment_tally_update ON fulfilment;
DROP TRIGGER fulfilment_tally_insert ON fulfilment;
DROP FUNCTION guardian_tally_truncate();
DROP FUNCTION guardian_tally_change();
DROP TABLE fulfilment_tally_change;
DROP TABLE fulfilment_tally;
