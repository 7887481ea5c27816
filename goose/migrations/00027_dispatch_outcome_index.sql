-- +goose NO TRANSACTION
-- +goose Up
-- The overview's last hour of dispatch outcomes (issue 23): the moves out
-- of dispatching, read by time. The BRIN range over created_at found the
-- hour but read every transition in it, and two of a payment's three
-- transitions (into pending, into dispatching) are not outcomes: after a
-- busy hour or with a backlog the overview read hundreds of thousands of
-- rows (252 ms at 10 million payments in `just bench-scale`). This index
-- holds the outcomes only, in time order: an insert appends at its right
-- edge, and the overview reads the hour's outcomes and nothing else.
--
-- CONCURRENTLY: a deployment with millions of rows keeps taking webhooks
-- while it builds.
CREATE INDEX CONCURRENTLY IF NOT EXISTS fulfilment_transition_outcome ON fulfilment_transition (created_at) INCLUDE (to_state)
    WHERE from_state = 'dispatching';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS fulfilment_transition_outcome;
