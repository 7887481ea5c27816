package db

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/state"
)

// Settled are the states whose counts grow with all history, and that
// triggers tally as rows enter and leave them (migration 00029) instead of
// a count reading them. The migration names the same three.
var Settled = []state.State{state.Fulfilled, state.Failed, state.Cancelled}

// Live are the states a payment passes through: they hold the backlog,
// not the history, and are counted through fulfilment_state_idx.
var Live = []state.State{state.Pending, state.Dispatching, state.NeedsReconciliation}

// tallied counts the settled states from fulfilment_tally and the changes
// not yet folded into it, in one statement (one snapshot, so the sum is
// exact while changes commit and the leader folds). It reads the tally's
// few rows and at most a fold interval of changes, whatever the table
// holds. Fulfilments and revocations (action revoke) are counted apart;
// a state with none is absent.
func tallied(ctx context.Context, q DBTX) (fulfilments, revocations map[state.State]int, err error) {
	rows, err := q.Query(ctx, `SELECT state, action, sum(n)::bigint FROM (
			SELECT state, action, n FROM fulfilment_tally
			UNION ALL SELECT state, action, n FROM fulfilment_tally_change
		) t GROUP BY state, action HAVING sum(n) <> 0`)
	if err != nil {
		return nil, nil, wrap("read tally", err)
	}
	fulfilments, revocations = map[state.State]int{}, map[state.State]int{}
	var st state.State
	var action string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&st, &action, &n}, func() error {
		fulfilments[st] += n
		if action == "revoke" {
			revocations[st] += n
		}
		return nil
	})
	return fulfilments, revocations, wrap("read tally", err)
}

// FoldTally moves the tally's pending changes into its counts, in one
// statement: a reader sees them on one side or the other, never both or
// neither. Two folds at once are safe: a change the first deleted is
// skipped by the second. It returns how many changes it folded.
func FoldTally(ctx context.Context, q DBTX) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, `WITH moved AS (
			DELETE FROM fulfilment_tally_change RETURNING state, action, n
		), sums AS (
			SELECT state, action, sum(n) AS n, count(*) AS changes FROM moved GROUP BY state, action
		), folded AS (
			INSERT INTO fulfilment_tally AS t (state, action, n) SELECT state, action, n FROM sums
			ON CONFLICT (state, action) DO UPDATE SET n = t.n + excluded.n
		)
		SELECT coalesce(sum(changes), 0)::bigint FROM sums`).Scan(&n)
	return n, wrap("fold tally", err)
}

// FoldTally is FoldTally on the store's pool.
func (s *Store) FoldTally(ctx context.Context) (int64, error) {
	return FoldTally(ctx, s.pool)
}
