package fulfilment_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

func TestReconcile(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name       string
		answer     connector.Answer
		err        error
		slow       bool
		want       state.State
		wantAnswer string
	}{
		{"DoneFulfils", connector.Performed, nil, false, state.Fulfilled, "done"},
		{"NotDoneRedispatches", connector.NotPerformed, nil, false, state.Pending, "not_done"},
		{"CannotTellStays", connector.CannotTell, nil, false, state.NeedsReconciliation, "cannot_tell"},
		{"ErrorStays", connector.Performed, errors.New("lookup exploded"), false, state.NeedsReconciliation, "cannot_tell"},
		{"TimeoutStays", connector.Performed, nil, true, state.NeedsReconciliation, "cannot_tell"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var asked atomic.Int32
			b := setup(t, func(c *fulfilment.Config) {
				c.ConnectorTimeout = 200 * time.Millisecond
				c.ReconcileGrace = time.Nanosecond
				c.ReconcileBackoff = time.Hour
				c.Looker = lookerFunc(func(ctx context.Context, key string) (connector.Answer, map[string]any, error) {
					asked.Add(1)
					if tt.slow {
						<-ctx.Done()
						return connector.CannotTell, nil, ctx.Err()
					}
					return tt.answer, map[string]any{"lookup": "fake"}, tt.err
				})
			})
			id := b.park(t, "evt_1", "pi_1")
			enqueuedBefore := b.enqueuer.count(id)

			sum, err := b.svc.Reconcile(b.ctx, "test reconciler")
			require.NoError(t, err)
			require.Equal(t, 1, sum.Checked)
			f := b.db.Fulfilment(t, id)
			require.Equal(t, tt.want, f.State)
			cs, err := db.Checks(b.ctx, b.db.Pool, id)
			require.NoError(t, err)
			require.Len(t, cs, 1)
			require.Equal(t, tt.wantAnswer, cs[0].Answer)
			wantEnqueued := 0
			if tt.want == state.Pending {
				wantEnqueued = 1
			}
			require.Equal(t, wantEnqueued, b.enqueuer.count(id)-enqueuedBefore)
			require.Equal(t, 1, b.rec.CallsFor(id), "a lookup never calls the connector's action")

			// A second round at once: a settled row is not asked again, an
			// undecided one waits out its backoff.
			sum, err = b.svc.Reconcile(b.ctx, "test reconciler")
			require.NoError(t, err)
			require.Zero(t, sum.Checked)
			require.EqualValues(t, 1, asked.Load())
			if tt.want == state.NeedsReconciliation {
				require.NotNil(t, f.NextCheckAt)
				require.True(t, f.NextCheckAt.After(time.Now().Add(50*time.Minute)), "backed off")
			}
		})
	}

	t.Run("GraceDelaysTheFirstLookup", func(t *testing.T) {
		t.Parallel()
		var asked atomic.Int32
		b := setup(t, func(c *fulfilment.Config) {
			c.ReconcileGrace = time.Hour
			c.Looker = lookerFunc(func(context.Context, string) (connector.Answer, map[string]any, error) {
				asked.Add(1)
				return connector.Performed, nil, nil
			})
		})
		b.park(t, "evt_1", "pi_1")
		sum, err := b.svc.Reconcile(b.ctx, "test reconciler")
		require.NoError(t, err)
		require.Zero(t, sum.Checked)
		require.Zero(t, asked.Load())
	})

	t.Run("WithoutALookerNothingIsAsked", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.park(t, "evt_1", "pi_1")
		sum, err := b.svc.Reconcile(b.ctx, "test reconciler")
		require.NoError(t, err)
		require.Zero(t, sum.Checked)
		require.Equal(t, state.NeedsReconciliation, b.db.Fulfilment(t, id).State)
	})
}

func TestResolve(t *testing.T) {
	t.Parallel()

	t.Run("EachResolution", func(t *testing.T) {
		t.Parallel()
		for _, to := range []state.State{state.Fulfilled, state.Pending, state.Cancelled} {
			t.Run(string(to), func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				id := b.park(t, "evt_1", "pi_1")
				before := b.enqueuer.count(id)
				f, err := b.svc.Resolve(b.ctx, fulfilment.Resolution{FulfilmentID: id, To: to, Operator: "alice", Reason: "checked", Evidence: "ledger row 42"})
				require.NoError(t, err)
				require.Equal(t, to, f.State)
				ts := b.db.Transitions(t, id)
				last := ts[len(ts)-1]
				require.Equal(t, "operator alice", last.Actor)
				require.Equal(t, "checked", last.Reason)
				require.Contains(t, string(last.Evidence), "ledger row 42")
				wantEnqueued := 0
				if to == state.Pending {
					wantEnqueued = 1
				}
				require.Equal(t, wantEnqueued, b.enqueuer.count(id)-before)
			})
		}
	})

	t.Run("RefusedInputChangesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.park(t, "evt_1", "pi_1")
		for _, r := range []fulfilment.Resolution{
			{FulfilmentID: "not-a-uuid", To: state.Cancelled, Operator: "alice", Reason: "r"},
			{FulfilmentID: id, To: state.Failed, Operator: "alice", Reason: "r"},
			{FulfilmentID: id, To: state.Cancelled, Reason: "r"},
			{FulfilmentID: id, To: state.Cancelled, Operator: "alice"},
			{FulfilmentID: id, To: state.Fulfilled, Operator: "alice", Reason: "r"},
			{FulfilmentID: id, To: state.Pending, Operator: "alice", Reason: "r"},
		} {
			_, err := b.svc.Resolve(b.ctx, r)
			require.ErrorIs(t, err, fulfilment.ErrInvalid, "%+v", r)
		}
		require.Equal(t, state.NeedsReconciliation, b.db.Fulfilment(t, id).State)
		require.Len(t, b.db.Transitions(t, id), 3)
	})

	t.Run("UnknownFulfilmentIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.svc.Resolve(b.ctx, fulfilment.Resolution{FulfilmentID: "00000000-0000-0000-0000-000000000000", To: state.Cancelled, Operator: "alice", Reason: "r"})
		require.ErrorIs(t, err, db.ErrNotFound)
	})

	t.Run("ConcurrentResolutionsOneWins", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.park(t, "evt_1", "pi_1")
		const n = 8
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				to := state.Cancelled
				if i%2 == 0 {
					to = state.Pending
				}
				_, err := b.svc.Resolve(b.ctx, fulfilment.Resolution{FulfilmentID: id, To: to, Operator: "op", Reason: "r", Evidence: "e"})
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		won := 0
		for err := range errs {
			if err == nil {
				won++
			} else {
				require.ErrorIs(t, err, fulfilment.ErrMoved)
			}
		}
		require.Equal(t, 1, won)
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment_transition WHERE from_state = 'needs_reconciliation'`))
		require.LessOrEqual(t, b.enqueuer.count(id), 2, "at most the intake's dispatch and one resolution's")
	})

	t.Run("SettledRowIsMoved", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.pay(t, "evt_1", "pi_1")
		_, err := b.dispatch(t, id)
		require.NoError(t, err)
		_, err = b.svc.Resolve(b.ctx, fulfilment.Resolution{FulfilmentID: id, To: state.Cancelled, Operator: "alice", Reason: "r"})
		require.ErrorIs(t, err, fulfilment.ErrMoved)
		require.Equal(t, state.Fulfilled, b.db.Fulfilment(t, id).State)
	})
}
