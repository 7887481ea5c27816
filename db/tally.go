package db

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/state"
)

// Settled are the states whose counts grow with all history, and that a
// trigger records as rows enter and leave them (migration 00029) instead of
// a count reading them. The migration's trigger names the same three.
var Settled = []state.State{state.Fulfilled, state.Failed, state.Cancelled}

// settledDeltas is what the changes in source (a table or CTE with
// fulfilment_change's columns) do to the settled counts, a row per state
// entered (+1) or left (-1), with the row's action; $1 is Settled.
func settledDeltas(source string) string {
	return `SELECT to_state AS state, action, 1 AS n FROM ` + source + ` WHERE to_state = ANY($1::text[])
		UNION ALL SELECT from_state, action, -1 FROM ` + source + ` WHERE from_state = ANY($1::text[])`
}

// Live are the states a payment passes through: they hold the backlog,
// not the history, and are counted through fulfilment_state_idx.
var Live = []state.State{state.Pending, state.Dispatching, state.NeedsReconciliation}

// OutcomeRetention is how long dispatch_outcome_minute keeps a minute's
// dispatch outcomes: the overview reads the last hour's.
const OutcomeRetention = 24 * time.Hour

// tallied counts the settled states from fulfilment_tally and the changes
// not yet folded into it, in one statement (one snapshot, so the sum is
// exact while changes commit and the leader folds). It reads the tally's
// few rows and at most a fold interval of changes, whatever the table
// holds. Fulfilments and revocations (action revoke) are counted apart;
// a state with none is absent.
func tallied(ctx context.Context, q DBTX) (fulfilments, revocations map[state.State]int, err error) {
	rows, err := q.Query(ctx, `SELECT state, action, sum(n)::bigint FROM (
			SELECT state, action, n FROM fulfilment_tally
			UNION ALL `+settledDeltas("fulfilment_change")+`
		) t GROUP BY state, action HAVING sum(n) <> 0`, stateNames(Settled))
	if err != nil {
		return nil, nil, wrap("read tally", err)
	}
	fulfilments, revocations = map[state.State]int{}, map[state.State]int{}
	var st state.State
	var action state.Action
	var n int
	_, err = pgx.ForEachRow(rows, []any{&st, &action, &n}, func() error {
		fulfilments[st] += n
		if action == state.Revoke {
			revocations[st] += n
		}
		return nil
	})
	return fulfilments, revocations, wrap("read tally", err)
}

// DispatchOutcomesSince counts moves out of dispatching since the start of
// t's minute, by the state they led to: how dispatch has gone lately. It
// reads the folded minutes (dispatch_outcome_minute, kept
// OutcomeRetention) and the changes not yet folded, in one statement: at
// most an hour's minutes and a fold interval of changes, however many
// the hour dispatched.
func DispatchOutcomesSince(ctx context.Context, q DBTX, t time.Time) (map[string]int, error) {
	rows, err := q.Query(ctx, `SELECT to_state, sum(n)::bigint FROM (
			SELECT to_state, n FROM dispatch_outcome_minute WHERE minute >= date_trunc('minute', $1::timestamptz)
			UNION ALL SELECT to_state, 1 FROM fulfilment_change WHERE from_state = 'dispatching' AND at >= date_trunc('minute', $1::timestamptz)
		) o GROUP BY to_state`, t)
	if err != nil {
		return nil, wrap("dispatch outcomes", err)
	}
	out := map[string]int{}
	var st string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&st, &n}, func() error { out[st] = n; return nil })
	return out, wrap("dispatch outcomes", err)
}

// FoldTally moves the pending changes into the settled states' tally and
// the outcomes' minutes, in one statement: a reader sees a change on one
// side or the other, never both or neither. It also drops the minutes
// older than OutcomeRetention. Two folds at once are safe: a change the
// first deleted is skipped by the second. It returns how many changes it
// folded.
func FoldTally(ctx context.Context, q DBTX) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, `WITH moved AS (
			DELETE FROM fulfilment_change RETURNING from_state, to_state, action, at
		), settled AS (
			SELECT state, action, sum(n) AS n FROM (`+settledDeltas("moved")+`) s GROUP BY state, action
		), tallied AS (
			-- In key order, so two folds at once take the rows' locks alike.
			INSERT INTO fulfilment_tally AS t (state, action, n) SELECT state, action, n FROM settled ORDER BY state, action
			ON CONFLICT (state, action) DO UPDATE SET n = t.n + excluded.n
		), outcomes AS (
			INSERT INTO dispatch_outcome_minute AS m (minute, to_state, n)
			SELECT date_trunc('minute', at), to_state, count(*) FROM moved
			WHERE from_state = 'dispatching' AND at >= now() - $2::interval -- a change older is past keeping
			GROUP BY 1, 2 ORDER BY 1, 2
			ON CONFLICT (minute, to_state) DO UPDATE SET n = m.n + excluded.n
		), expired AS (
			DELETE FROM dispatch_outcome_minute WHERE minute < now() - $2::interval
		)
		SELECT count(*) FROM moved`, stateNames(Settled), OutcomeRetention.String()).Scan(&n)
	return n, wrap("fold tally", err)
}

// FoldTally is FoldTally on the store's pool.
func (s *Store) FoldTally(ctx context.Context) (int64, error) {
	return FoldTally(ctx, s.pool)
}
