package db_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
)

// trueCounts counts the fulfilment table by reading it, per state, in the
// shape GetStats gives: the tally's standard.
func trueCounts(t *testing.T, q db.DBTX, filter string) map[state.State]int {
	t.Helper()
	rows, err := q.Query(context.Background(), `SELECT state, count(*) FROM fulfilment WHERE `+filter+` GROUP BY state`)
	require.NoError(t, err)
	out := map[state.State]int{}
	for rows.Next() {
		var s state.State
		var n int
		require.NoError(t, rows.Scan(&s, &n))
		out[s] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// TestSettledAndLiveCoverEveryState: every state is counted one way.
func TestSettledAndLiveCoverEveryState(t *testing.T) {
	t.Parallel()
	seen := map[state.State]int{}
	for _, s := range append(append([]state.State{}, db.Settled...), db.Live...) {
		seen[s]++
	}
	for _, s := range state.All {
		require.Equal(t, 1, seen[s], "%s counted once", s)
	}
	require.Len(t, seen, len(state.All))
}

// TestTallyStaysExactUnderConcurrentMoves: workers move payments through
// every move into and out of a settled state at once (outcomes, declines,
// cancels, a cancel reopened, revocations), each in its own transaction,
// while the leader's fold runs over and over; the counts and the hour's
// dispatch outcomes read afterwards, before and after a last fold, are the
// table's and the transition log's own.
func TestTallyStaysExactUnderConcurrentMoves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := dbtest.NewDB(t)
	const payments, workers = 240, 6
	ids := make([]string, payments)
	for i := range ids {
		ev, err := db.InsertEvents(ctx, d.Pool, []db.BatchEvent{{Deliveries: 1, EventParams: db.EventParams{Provider: "stripe",
			EventID: fmt.Sprintf("evt_tally_%d", i), Type: "checkout.session.completed", PaymentID: fmt.Sprintf("pi_tally_%d", i), Payload: []byte(`{}`)}}})
		require.NoError(t, err)
		ids[i], _, err = db.InsertFulfilment(ctx, d.Pool, ev[0].ID, "test", "a test row")
		require.NoError(t, err)
	}
	move := func(id string, from, to state.State, attempt int) error {
		_, err := db.Transit(ctx, d.Pool, db.TransitionParams{ID: id, From: from, To: to, Attempt: attempt, Actor: "test", Reason: "test"})
		return err
	}
	// Beside the moves, until they end: two folders (a leader and its
	// successor, folding at once) and a reader as the gauges read.
	done := make(chan struct{})
	var background sync.WaitGroup
	var folds, reads atomic.Int64
	// repeat runs step until the moves end or it fails.
	repeat := func(step func() bool) {
		background.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if !step() {
					return
				}
			}
		})
	}
	for range 2 {
		repeat(func() bool {
			_, err := db.FoldTally(ctx, d.Pool)
			folds.Add(1)
			return assert.NoError(t, err)
		})
	}
	// Every payment is in exactly one state at every read, while rows move
	// between the live counts and the tally.
	reader := db.NewStatsReader(d.Pool)
	repeat(func() bool {
		st, err := reader.Read(ctx)
		if !assert.NoError(t, err) {
			return false
		}
		n := 0
		for s, c := range st.ByState {
			n += c - st.Revocations[s]
		}
		reads.Add(1)
		return assert.Equal(t, payments, n, "payments counted in all states at one read: %v", st.ByState)
	})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < payments; i += workers {
				id := ids[i]
				if _, err := db.ClaimForDispatch(ctx, d.Pool, db.ClaimParams{ID: id, Actor: "test", Timeout: 30 * time.Second}); !assert.NoError(t, err) {
					return
				}
				var err error
				switch i % 4 {
				case 0: // fulfilled, and taken back
					if err = move(id, state.Dispatching, state.Fulfilled, 1); err == nil {
						_, err = d.Pool.Exec(ctx, `INSERT INTO fulfilment (event_pk, provider, payment_id, state, idempotency_key, action)
							SELECT event_pk, provider, payment_id, 'fulfilled', guardian_revoke_key(provider, payment_id, 0), 'revoke' FROM fulfilment WHERE id = $1`, id)
					}
				case 1: // declined
					err = move(id, state.Dispatching, state.Failed, 1)
				case 2: // parked, cancelled, reopened, cancelled again
					for _, m := range [][2]state.State{{state.Dispatching, state.NeedsReconciliation}, {state.NeedsReconciliation, state.Cancelled},
						{state.Cancelled, state.NeedsReconciliation}, {state.NeedsReconciliation, state.Cancelled}} {
						if err = move(id, m[0], m[1], 1); err != nil {
							break
						}
					}
				case 3: // parked, then found done
					if err = move(id, state.Dispatching, state.NeedsReconciliation, 1); err == nil {
						err = move(id, state.NeedsReconciliation, state.Fulfilled, 1)
					}
				}
				if !assert.NoError(t, err) {
					return
				}
			}
		})
	}
	wg.Wait()
	close(done)
	background.Wait()
	require.Positive(t, folds.Load())
	require.Positive(t, reads.Load())

	check := func(when string) {
		st, err := db.GetStats(ctx, d.Pool)
		require.NoError(t, err)
		require.Equal(t, trueCounts(t, d.Pool, "TRUE"), st.ByState, when)
		require.Equal(t, trueCounts(t, d.Pool, "action = 'revoke'"), st.Revocations, when)
		outcomes, err := db.DispatchOutcomesSince(ctx, d.Pool, time.Now().Add(-time.Hour))
		require.NoError(t, err)
		want := map[string]int{}
		rows, err := d.Pool.Query(ctx, `SELECT to_state, count(*) FROM fulfilment_transition WHERE from_state = 'dispatching' GROUP BY to_state`)
		require.NoError(t, err)
		for rows.Next() {
			var s string
			var n int
			require.NoError(t, rows.Scan(&s, &n))
			want[s] = n
		}
		require.NoError(t, rows.Err())
		require.Equal(t, want, outcomes, "the hour's outcomes are the transition log's, %s", when)
	}
	check("as the moves left it")
	require.Equal(t, map[state.State]int{state.Fulfilled: 120 + 60, state.Failed: 60, state.Cancelled: 60}, trueCounts(t, d.Pool, "TRUE"))
	_, err := db.FoldTally(ctx, d.Pool)
	require.NoError(t, err)
	require.Zero(t, d.Count(t, `SELECT count(*) FROM fulfilment_change`), "the last fold took every change")
	check("after the last fold")

	// A deleted row leaves its count; a truncated table leaves none.
	_, err = d.Pool.Exec(ctx, `DELETE FROM fulfilment WHERE action = 'revoke'`)
	require.NoError(t, err)
	check("after a delete")
	_, err = d.Pool.Exec(ctx, `TRUNCATE fulfilment_identity CASCADE`)
	require.NoError(t, err)
	check("after a truncate")
	require.Zero(t, d.Count(t, `SELECT count(*) FROM dispatch_outcome_minute`))
}

// TestStatsReadsDoNotGrowWithHistory: reading the table's shape reads a
// handful of rows beside 25,000 settled fulfilments, and counts them. It
// once counted fulfilled by reading the whole table, in every process at
// start and every 5 minutes after: at 10 million payments a 6 GB scan
// beside intake (docs/performance.md, "As the tables grow").
func TestStatsReadsDoNotGrowWithHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	_, err := tx.Exec(ctx, `
		INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body)
		SELECT 'stripe', 'evt_' || g, 'checkout.session.completed', 'pi_' || g, '\x7b7d'::bytea FROM generate_series(1, 25000) g;
		INSERT INTO fulfilment (event_pk, provider, payment_id, state, idempotency_key)
		SELECT id, provider, payment_id, CASE WHEN id % 5 = 0 THEN 'failed' ELSE 'fulfilled' END, guardian_idempotency_key(provider, payment_id, 0)
		FROM webhook_event;
		ANALYZE fulfilment_identity; ANALYZE fulfilment_move`)
	require.NoError(t, err)
	_, err = db.FoldTally(ctx, tx)
	require.NoError(t, err)
	before := rowsRead(t, tx)
	st, err := db.GetStats(ctx, tx)
	require.NoError(t, err)
	require.Less(t, rowsRead(t, tx)-before, 50, "rows read for the table's shape beside 25,000 settled fulfilments")
	require.Equal(t, map[state.State]int{state.Fulfilled: 20000, state.Failed: 5000}, st.ByState)
}
