package fulfilment_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

func TestResolve(t *testing.T) {
	t.Parallel()

	resolution := func(id string, to state.State) fulfilment.Resolution {
		return fulfilment.Resolution{FulfilmentID: id, Attempt: 1, To: to, Operator: "alice", Reason: "checked", Evidence: "ledger row 42"}
	}

	t.Run("EachResolution", func(t *testing.T) {
		t.Parallel()
		for _, to := range []state.State{state.Fulfilled, state.Pending, state.Cancelled} {
			t.Run(string(to), func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				id := b.park(t, "evt_1", "pi_1")
				b.db.Backdate(t, id, time.Now().Add(-time.Hour)) // the parked call is long over
				before := b.enqueuer.count(t, id)
				f, err := b.svc.Resolve(b.ctx, resolution(id, to))
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
				require.Equal(t, wantEnqueued, b.enqueuer.count(t, id)-before)
			})
		}
	})

	t.Run("RefusedInputChangesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.park(t, "evt_1", "pi_1")
		ok := resolution(id, state.Cancelled)
		for _, change := range []func(*fulfilment.Resolution){
			func(r *fulfilment.Resolution) { r.FulfilmentID = "not-a-uuid" },
			func(r *fulfilment.Resolution) { r.To = state.Failed },
			func(r *fulfilment.Resolution) { r.Attempt = 0 },
			func(r *fulfilment.Resolution) { r.Operator = "" },
			func(r *fulfilment.Resolution) { r.Reason = " " },
			func(r *fulfilment.Resolution) { r.To, r.Evidence = state.Fulfilled, "" },
			func(r *fulfilment.Resolution) { r.To, r.Evidence = state.Pending, "" },
		} {
			r := ok
			change(&r)
			_, err := b.svc.Resolve(b.ctx, r)
			require.ErrorIs(t, err, fulfilment.ErrInvalid, "%+v", r)
		}
		require.Equal(t, state.NeedsReconciliation, b.db.Fulfilment(t, id).State)
		require.Len(t, b.db.Transitions(t, id), 3)
	})

	t.Run("UnknownFulfilmentIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.svc.Resolve(b.ctx, resolution("00000000-0000-0000-0000-000000000000", state.Cancelled))
		require.ErrorIs(t, err, db.ErrNotFound)
	})

	t.Run("ADecisionAboutAnotherAttemptIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.park(t, "evt_1", "pi_1")
		b.db.Backdate(t, id, time.Now().Add(-time.Hour))
		// Attempt 1 is settled as "nothing happened" and sent again; attempt
		// 2 parks too. An operator's "pending" decided on attempt 1's page
		// must not send attempt 3.
		_, err := b.svc.Resolve(b.ctx, resolution(id, state.Pending))
		require.NoError(t, err)
		b.rec.Answer = answer(state.Unknown)
		_, err = b.dispatch(t, id)
		require.NoError(t, err)
		require.Equal(t, 2, b.db.Fulfilment(t, id).Attempt)
		b.db.Backdate(t, id, time.Now().Add(-time.Hour))
		before := b.enqueuer.count(t, id)
		_, err = b.svc.Resolve(b.ctx, resolution(id, state.Pending))
		require.ErrorIs(t, err, fulfilment.ErrMoved)
		require.Equal(t, before, b.enqueuer.count(t, id), "nothing dispatched")
		require.Equal(t, state.NeedsReconciliation, b.db.Fulfilment(t, id).State)
	})

	t.Run("PendingIsRefusedWhileTheCallCouldBeInFlight", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.park(t, "evt_1", "pi_1") // dispatched a moment ago
		_, err := b.svc.Resolve(b.ctx, resolution(id, state.Pending))
		require.ErrorIs(t, err, fulfilment.ErrInFlight)
		require.Equal(t, state.NeedsReconciliation, b.db.Fulfilment(t, id).State)
		// Cancelling or confirming is a fact about the past: not refused.
		_, err = b.svc.Resolve(b.ctx, resolution(id, state.Cancelled))
		require.NoError(t, err)
	})

	t.Run("ConcurrentResolutionsOneWins", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.park(t, "evt_1", "pi_1")
		b.db.Backdate(t, id, time.Now().Add(-time.Hour))
		const n = 8
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				to := state.Cancelled
				if i%2 == 0 {
					to = state.Pending
				}
				_, err := b.svc.Resolve(b.ctx, resolution(id, to))
				errs <- err
			})
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
		require.LessOrEqual(t, b.enqueuer.count(t, id), 2, "at most the intake's dispatch and one resolution's")
	})

	t.Run("SettledRowIsMoved", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.pay(t, "evt_1", "pi_1")
		_, err := b.dispatch(t, id)
		require.NoError(t, err)
		_, err = b.svc.Resolve(b.ctx, resolution(id, state.Cancelled))
		require.ErrorIs(t, err, fulfilment.ErrMoved)
		require.Equal(t, state.Fulfilled, b.db.Fulfilment(t, id).State)
	})
}

func TestCancelled(t *testing.T) {
	t.Parallel()

	cancelled := func(t *testing.T) (*testBundle, string) {
		b := setup(t)
		id := b.park(t, "evt_1", "pi_1")
		_, err := b.svc.Resolve(b.ctx, fulfilment.Resolution{FulfilmentID: id, Attempt: 1, To: state.Cancelled, Operator: "alice", Reason: "customer refunded"})
		require.NoError(t, err)
		return b, id
	}

	t.Run("KeepsThePaymentFromAReplay", func(t *testing.T) {
		t.Parallel()
		b, _ := cancelled(t)
		res, err := b.svc.Replay(b.ctx, "stripe", "evt_1", "bob")
		require.NoError(t, err)
		require.Empty(t, res.FulfilmentID)
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment`))
	})

	t.Run("KeepsThePaymentFromAnotherEventType", func(t *testing.T) {
		t.Parallel()
		b, _ := cancelled(t)
		ev := providertest.Payment("evt_2", "pi_1")
		ev.Type = "checkout.session.completed"
		res, err := b.svc.Accept(b.ctx, ev)
		require.NoError(t, err)
		require.Empty(t, res.FulfilmentID)
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment`))
		require.Equal(t, 1, len(b.rec.Calls()), "one call, the parked one")
	})

	t.Run("ReopensOnTheSameRowAndKeyWithEvidence", func(t *testing.T) {
		t.Parallel()
		b, id := cancelled(t)
		reopen := fulfilment.Reopening{FulfilmentID: id, Attempt: 1, Operator: "carol", Reason: "refund failed"}
		_, err := b.svc.Reopen(b.ctx, reopen)
		require.ErrorIs(t, err, fulfilment.ErrInvalid, "evidence is required")
		reopen.Attempt = 2
		reopen.Evidence = "refund re_123 failed"
		_, err = b.svc.Reopen(b.ctx, reopen)
		require.ErrorIs(t, err, fulfilment.ErrMoved, "fenced on the attempt")
		reopen.Attempt = 1
		f, err := b.svc.Reopen(b.ctx, reopen)
		require.NoError(t, err)
		require.Equal(t, id, f.ID)
		require.Equal(t, state.NeedsReconciliation, f.State)
		require.Equal(t, 1, f.Attempt)
		ts := b.db.Transitions(t, id)
		last := ts[len(ts)-1]
		require.Equal(t, "operator carol", last.Actor)
		require.Contains(t, string(last.Evidence), "refund re_123 failed")
		_, err = b.svc.Reopen(b.ctx, reopen)
		require.ErrorIs(t, err, fulfilment.ErrMoved, "only a cancelled row reopens")
	})
}
