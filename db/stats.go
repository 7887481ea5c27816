package db

import (
	"context"
	"maps"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/guardian-pay/guardian/app/state"
)

// Stats is the shape of the fulfilment table at one moment.
type Stats struct {
	ByState map[state.State]int
	// Revocations counts the revocations (rows with action revoke, which
	// ByState counts too) by state.
	Revocations map[state.State]int
	// OldestNeedsReconciliation is when the longest-waiting parked
	// fulfilment was parked; nil when none waits.
	OldestNeedsReconciliation *time.Time
	// OldestPending is when the longest-waiting pending fulfilment entered
	// pending; nil when none waits.
	OldestPending *time.Time
	// AwaitingItems counts the purchases recorded awaiting their items
	// (RecordPurchases), OldestAwaiting is when the longest-waiting one
	// was recorded; nil when none waits.
	AwaitingItems  int
	OldestAwaiting *time.Time
	// Live counts the rows in the Live states by action (action_name) and
	// state, with when the longest-waiting one entered it: each action's
	// backlog on its own (an action's names come from the actions file).
	Live []LiveCount
}

// LiveCount is how many of an action's rows are in a Live state, and since
// when the oldest of them has been.
type LiveCount struct {
	Action string
	State  state.State
	Count  int
	Oldest time.Time
}

// StatsReader is the one reader of Stats for those that ask often (the
// metrics' periodic read, the dashboard's overview, /api/v1/stats): each
// read is bounded by statsTimeout, and costs the same at any size of the
// table (see GetStats). Safe for concurrent use.
type StatsReader struct {
	pool *pgxpool.Pool
}

// statsTimeout bounds one read of the table's shape.
const statsTimeout = 5 * time.Second

// NewStatsReader returns a StatsReader over pool.
func NewStatsReader(pool *pgxpool.Pool) *StatsReader {
	return &StatsReader{pool: pool}
}

// Read returns the table's shape now, read in one read-only snapshot, so
// a row that moves meanwhile is counted once, in one state or the other.
func (r *StatsReader) Read(ctx context.Context) (Stats, error) {
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	var st Stats
	err := pgx.BeginTxFunc(ctx, r.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		// A backlog's few rows, never worth compiling for: with statistics
		// taken while a backlog was pending, the live rows' estimate put
		// the read of their actions past jit_above_cost, and compiling it
		// took 200 ms of a 2 ms read at a million payments.
		if _, err := tx.Exec(ctx, `SET LOCAL jit = off`); err != nil {
			return wrap("stats without jit", err)
		}
		var err error
		st, err = GetStats(ctx, tx)
		return err
	})
	return st, err
}

// GetStats counts fulfilments per state and finds the oldest parked and the
// oldest pending one, each action's backlog, and the purchases awaiting
// their items. The Live states are counted through
// fulfilment_state_idx, in time proportional to the backlog; the Settled
// ones, which grow with all history, are read from the tally the triggers
// keep (tallied). No part of it reads history.
func GetStats(ctx context.Context, q DBTX) (Stats, error) {
	counts, err := CountByState(ctx, q, Live...)
	if err != nil {
		return Stats{}, err
	}
	revocations, err := CountRevocationsByState(ctx, q, Live...)
	if err != nil {
		return Stats{}, err
	}
	settled, settledRevocations, err := tallied(ctx, q)
	if err != nil {
		return Stats{}, err
	}
	maps.Copy(counts, settled)
	maps.Copy(revocations, settledRevocations)
	st := Stats{ByState: counts, Revocations: revocations}
	// Two statements, so each min is one step down fulfilment_state_idx.
	for s, dst := range map[state.State]**time.Time{state.NeedsReconciliation: &st.OldestNeedsReconciliation, state.Pending: &st.OldestPending} {
		if err := q.QueryRow(ctx, `SELECT min(updated_at) FROM fulfilment_move WHERE state = $1`, s).Scan(dst); err != nil {
			return Stats{}, wrap("oldest "+string(s), err)
		}
	}
	// Through fulfilment_state_idx, as the counts above, on the moving
	// rows alone, which carry their action's name (migration 00051).
	// Joined to the identities, with statistics taken while a backlog was
	// pending, the planner read every identity into a hash (370 ms at a
	// million payments, for a backlog of four); the name read row by row
	// by id cost 200 ms with 75,914 pending.
	rows, err := q.Query(ctx, `SELECT action_name, state, count(*), min(updated_at)
		FROM fulfilment_move WHERE state = ANY($1::text[]) GROUP BY 1, 2 ORDER BY 1, 2`, stateNames(Live))
	if err != nil {
		return Stats{}, wrap("live by action", err)
	}
	if st.Live, err = pgx.CollectRows(rows, pgx.RowToStructByPos[LiveCount]); err != nil {
		return Stats{}, wrap("live by action", err)
	}
	// Through purchase_awaiting: as many rows as are waiting.
	err = q.QueryRow(ctx, `SELECT count(*), min(routed_at) FROM purchase WHERE awaiting_items IS NOT NULL`).Scan(&st.AwaitingItems, &st.OldestAwaiting)
	return st, wrap("awaiting purchases", err)
}
