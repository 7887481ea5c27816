package fulfilment_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/lock"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

func TestDispatch(t *testing.T) {
	t.Parallel()

	t.Run("OutcomeTable", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			outcome state.Outcome
			want    state.State
			wantErr error
		}{
			{state.Done, state.Fulfilled, nil},
			{state.Declined, state.Failed, nil},
			{state.Unknown, state.NeedsReconciliation, nil},
			{state.NotSent, state.Pending, fulfilment.ErrNotDelivered},
			{state.NotDelivered, state.Pending, fulfilment.ErrNotDelivered},
		}
		for _, tt := range tests {
			t.Run(tt.outcome.String(), func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				b.rec.Answer = answer(tt.outcome)
				id := b.pay(t, "evt_1", "pi_1")
				res, err := b.dispatch(t, id)
				if tt.wantErr != nil {
					require.ErrorIs(t, err, tt.wantErr)
				} else {
					require.NoError(t, err)
				}
				require.Equal(t, fulfilment.DispatchResult{Called: true, Attempt: 1, Outcome: tt.outcome, State: tt.want}, res)
				f := b.db.Fulfilment(t, id)
				require.Equal(t, tt.want, f.State)
				require.Equal(t, 1, f.Attempt)
				require.Equal(t, 1, b.rec.CallsFor(id))
				ts := b.db.Transitions(t, id)
				require.Len(t, ts, 3)
				require.Equal(t, []state.State{state.Pending, state.Dispatching, tt.want}, []state.State{ts[0].To, ts[1].To, ts[2].To})
				require.Equal(t, "test dispatcher", ts[2].Actor)
				require.JSONEq(t, `{"outcome":"`+tt.outcome.String()+`","connector":"recorder"}`, string(ts[2].Evidence))
			})
		}
	})

	t.Run("CallCarriesTheKeyTheAttemptAndTheEvent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.pay(t, "evt_1", "pi_1")
		_, err := b.dispatch(t, id)
		require.NoError(t, err)
		calls := b.rec.Calls()
		require.Len(t, calls, 1)
		require.JSONEq(t, `{"id":"evt_1"}`, string(calls[0].Payload))
		calls[0].Payload = nil
		key, err := db.IdempotencyKey(b.ctx, b.db.Pool, "stripe", "pi_1", 0)
		require.NoError(t, err)
		require.Equal(t, connector.Request{Key: key, FulfilmentID: id, Attempt: 1, Provider: "stripe", PaymentID: "pi_1", EventID: "evt_1", EventType: "payment_intent.succeeded", Action: state.Fulfil}, calls[0])
	})

	t.Run("RowFoundDispatchingIsParkedWithoutACall", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.pay(t, "evt_1", "pi_1")
		b.db.ForceDispatching(t, id, time.Now()) // a claim that named no claimant
		res, err := b.dispatch(t, id)
		require.NoError(t, err)
		require.False(t, res.Called)
		require.Equal(t, state.NeedsReconciliation, res.State)
		require.Zero(t, b.rec.CallsFor(id))
		f := b.db.Fulfilment(t, id)
		require.Equal(t, state.NeedsReconciliation, f.State)
		require.Equal(t, 1, f.Attempt, "parking takes no new attempt")
		ts := b.db.Transitions(t, id)
		require.Contains(t, ts[len(ts)-1].Reason, "outcome is unknown")
	})

	t.Run("OwnEarlierClaimIsParked", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.pay(t, "evt_1", "pi_1")
		_, err := db.ClaimForDispatch(b.ctx, b.db.Pool, db.ClaimParams{ID: id, Actor: "crashed", Claimant: "river job 7", Timeout: 30 * time.Second})
		require.NoError(t, err)
		res, err := b.svc.Dispatch(b.ctx, fulfilment.DispatchRequest{FulfilmentID: id, Actor: "retry", Claimant: "river job 7"})
		require.NoError(t, err)
		require.Equal(t, state.NeedsReconciliation, res.State)
		require.Zero(t, b.rec.CallsFor(id))
	})

	t.Run("AnotherLiveClaimIsLeftToItsClaimant", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.pay(t, "evt_1", "pi_1")
		_, err := db.ClaimForDispatch(b.ctx, b.db.Pool, db.ClaimParams{ID: id, Actor: "first job", Claimant: "river job 7", Timeout: 30 * time.Second})
		require.NoError(t, err)
		res, err := b.svc.Dispatch(b.ctx, fulfilment.DispatchRequest{FulfilmentID: id, Actor: "duplicate", Claimant: "river job 8"})
		require.NoError(t, err)
		require.Equal(t, fulfilment.DispatchResult{State: state.Dispatching}, res)
		require.Equal(t, state.Dispatching, b.db.Fulfilment(t, id).State, "a duplicate job must not park a call in flight")
		require.Zero(t, b.rec.CallsFor(id))

		// Once the first claim's call cannot be in flight any more, the
		// duplicate parks it: its outcome is unknown.
		b.db.Backdate(t, id, time.Now().Add(-time.Hour))
		res, err = b.svc.Dispatch(b.ctx, fulfilment.DispatchRequest{FulfilmentID: id, Actor: "duplicate", Claimant: "river job 8"})
		require.NoError(t, err)
		require.Equal(t, state.NeedsReconciliation, res.State)
		require.Zero(t, b.rec.CallsFor(id))
	})

	t.Run("SettledRowIsLeftAlone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.pay(t, "evt_1", "pi_1")
		_, err := b.dispatch(t, id)
		require.NoError(t, err)
		res, err := b.dispatch(t, id)
		require.NoError(t, err)
		require.Equal(t, fulfilment.DispatchResult{State: state.Fulfilled}, res)
		require.Equal(t, 1, b.rec.CallsFor(id))
	})

	t.Run("UnknownFulfilmentIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.dispatch(t, "00000000-0000-0000-0000-000000000000")
		require.ErrorIs(t, err, db.ErrNotFound)
		require.Empty(t, b.rec.Calls())
	})

	t.Run("DeadlineIsMeasuredFromBeforeTheClaim", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		deadlines := make(chan time.Time, 1)
		b.rec.Answer = func(ctx context.Context, _ connector.Request) connector.Result {
			d, _ := ctx.Deadline()
			deadlines <- d
			return connector.Result{Outcome: state.Done}
		}
		id := b.pay(t, "evt_1", "pi_1")
		_, err := b.dispatch(t, id)
		require.NoError(t, err)
		// dispatched_at is stamped while the claim runs, by this machine's
		// Postgres: a deadline taken once the claim returned lands after it
		// plus the timeout.
		claimed := *b.db.Fulfilment(t, id).DispatchedAt
		require.False(t, (<-deadlines).After(claimed.Add(b.svc.ConnectorTimeout())),
			"the call's deadline must count the claim's time")
	})

	// lateAnswer hangs the call until the sweep has parked the row (its
	// lease ran out), then answers with o; it returns the fulfilment.
	lateAnswer := func(t *testing.T, o state.Outcome) (*testBundle, string) {
		var now time.Time
		b := setup(t, func(c *fulfilment.Config) { c.Now = func() time.Time { return now } })
		entered, release := make(chan struct{}), make(chan struct{})
		b.rec.Answer = func(context.Context, connector.Request) connector.Result {
			close(entered)
			<-release
			return connector.Result{Outcome: o}
		}
		id := b.pay(t, "evt_1", "pi_1")
		done := make(chan error, 1)
		go func() { _, err := b.dispatch(t, id); done <- err }()
		<-entered
		now = b.db.Fulfilment(t, id).DispatchedAt.Add(time.Hour)
		parked, err := b.svc.ParkStale(b.ctx, "test sweeper", lock.Lease{Name: "guardian_sweep_stale", Fence: 1})
		require.NoError(t, err)
		require.Equal(t, 1, parked)
		close(release)
		require.NoError(t, <-done)
		require.Equal(t, 1, b.rec.CallsFor(id))
		return b, id
	}

	t.Run("LateSuccessSettlesTheRowTheSweepParked", func(t *testing.T) {
		t.Parallel()
		b, id := lateAnswer(t, state.Done)
		require.Equal(t, state.Fulfilled, b.db.Fulfilment(t, id).State)
		ts := b.db.Transitions(t, id)
		last := ts[len(ts)-1]
		require.Equal(t, state.NeedsReconciliation, last.From)
		require.Contains(t, last.Reason, "late success")
	})

	t.Run("LateFailureLeavesTheParkedRowParked", func(t *testing.T) {
		t.Parallel()
		b, id := lateAnswer(t, state.Declined)
		require.Equal(t, state.NeedsReconciliation, b.db.Fulfilment(t, id).State, "only a success is a fact that settles a parked row")
	})
}

func nullableAgo(d time.Duration) *time.Time {
	if d == 0 {
		return nil
	}
	t := time.Now().Add(d)
	return &t
}

func TestDispatchBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var evs []provider.Event
	for i := range 120 {
		evs = append(evs, providertest.Payment(fmt.Sprintf("evt_%d", i), fmt.Sprintf("pi_%d", i)))
	}
	res, errs := b.storm(t, evs)
	ids := make([]string, len(res))
	for i := range res {
		require.NoError(t, errs[i])
		ids[i] = res[i].FulfilmentID
	}
	// Every fulfilment dispatched at once, each by its own dispatcher, and
	// two dispatchers at once for the first ten (a duplicate job).
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make([]fulfilment.DispatchResult, len(ids)+10)
	derrs := make([]error, len(ids)+10)
	for i := range len(ids) + 10 {
		id := ids[i%len(ids)]
		wg.Go(func() {
			<-start
			results[i], derrs[i] = b.svc.Dispatch(b.ctx, fulfilment.DispatchRequest{FulfilmentID: id, Actor: "test", Claimant: fmt.Sprint("job ", i)})
		})
	}
	close(start)
	wg.Wait()
	called := 0
	for i := range results {
		require.NoError(t, derrs[i])
		if results[i].Called {
			called++
		}
	}
	require.Equal(t, 120, called, "each fulfilment called once, duplicates left to their claimant")
	for _, id := range ids {
		require.Equal(t, 1, b.rec.CallsFor(id))
		require.Equal(t, "fulfilled", string(b.db.Fulfilment(t, id).State))
	}
	claims := b.db.Count(t, `SELECT count(DISTINCT xmin::text) FROM fulfilment_transition WHERE to_state = 'dispatching'`)
	outcomes := b.db.Count(t, `SELECT count(DISTINCT xmin::text) FROM fulfilment_transition WHERE to_state = 'fulfilled'`)
	require.Less(t, claims, 120, "claims shared statements")
	require.Less(t, outcomes, 120, "outcomes shared statements")
	t.Logf("120 claims in %d statements, 120 outcomes in %d", claims, outcomes)
}
