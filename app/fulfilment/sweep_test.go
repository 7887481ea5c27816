package fulfilment_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/lock"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

func TestParkStale(t *testing.T) {
	t.Parallel()

	t.Run("AtTheLeaseBoundary", func(t *testing.T) {
		t.Parallel()
		var now time.Time
		b := setup(t, func(c *fulfilment.Config) { c.Now = func() time.Time { return now } })
		id := b.pay(t, "evt_1", "pi_1")
		at := time.Now().UTC().Truncate(time.Millisecond)
		b.db.ForceDispatching(t, id, at)
		lease := lock.Lease{Name: "guardian_sweep_stale", Fence: 1}

		now = at.Add(20 * time.Second) // exactly the lease: still live
		parked, err := b.svc.ParkStale(b.ctx, "test sweeper", lease)
		require.NoError(t, err)
		require.Zero(t, parked)
		require.Equal(t, state.Dispatching, b.db.Fulfilment(t, id).State)

		now = at.Add(20*time.Second + time.Millisecond) // a millisecond past it
		parked, err = b.svc.ParkStale(b.ctx, "test sweeper", lease)
		require.NoError(t, err)
		require.Equal(t, 1, parked)
		f := b.db.Fulfilment(t, id)
		require.Equal(t, state.NeedsReconciliation, f.State)
		ts := b.db.Transitions(t, id)
		require.Equal(t, "test sweeper", ts[len(ts)-1].Actor)
		require.Contains(t, ts[len(ts)-1].Reason, "lease expired")
		require.Zero(t, b.rec.CallsFor(id))
	})

	t.Run("StaleFenceWritesNothing", func(t *testing.T) {
		t.Parallel()
		var now time.Time
		b := setup(t, func(c *fulfilment.Config) { c.Now = func() time.Time { return now } })
		id := b.pay(t, "evt_1", "pi_1")
		b.db.ForceDispatching(t, id, time.Now())
		now = time.Now().Add(time.Hour)
		_, err := b.svc.ParkStale(b.ctx, "new holder", lock.Lease{Name: "guardian_sweep_stale", Fence: 2})
		require.NoError(t, err)
		id2 := b.pay(t, "evt_2", "pi_2")
		b.db.ForceDispatching(t, id2, time.Now())
		_, err = b.svc.ParkStale(b.ctx, "stalled holder", lock.Lease{Name: "guardian_sweep_stale", Fence: 1})
		require.ErrorIs(t, err, db.ErrStaleFence)
		require.Equal(t, state.Dispatching, b.db.Fulfilment(t, id2).State)
	})
}

// dropJobs deletes the dispatch jobs intake wrote for the fulfilment, as
// River UI's delete would.
func (b *testBundle) dropJobs(t *testing.T, id string) {
	t.Helper()
	_, err := b.db.Pool.Exec(b.ctx, `DELETE FROM river_job WHERE args ->> 'fulfilment_id' = $1`, id)
	require.NoError(t, err)
}

func TestRequeueStranded(t *testing.T) {
	t.Parallel()

	// Each case leaves a pending fulfilment, pending for an hour, with the
	// River job (if any) the case names, as River would have left it.
	tests := []struct {
		name        string
		job         string // river_job state, "" for none
		attemptedAt time.Duration
		requeued    bool
	}{
		{"NoJob (deleted in River UI)", "", 0, true},
		{"Discarded (retries exhausted)", "discarded", -time.Hour, true},
		{"Cancelled (River UI)", "cancelled", -time.Hour, true},
		{"Completed", "completed", -time.Hour, true},
		{"RunningSinceLongAgo (fetch answer lost)", "running", -time.Hour, true},
		{"RunningJustNow", "running", -time.Second, false},
		{"Available", "available", 0, false},
		{"Retryable", "retryable", -time.Minute, false},
		{"Scheduled", "scheduled", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			id := b.pay(t, "evt_1", "pi_1")
			b.db.Backdate(t, id, time.Now().Add(-time.Hour))
			b.dropJobs(t, id)
			if tt.job != "" {
				_, err := b.db.Pool.Exec(b.ctx, `
					INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, attempt, attempted_at, finalized_at, scheduled_at)
					VALUES (jsonb_build_object('fulfilment_id', $1::text), 'guardian_dispatch', 25, 1, 'dispatch', $2::river_job_state,
					        CASE WHEN $3::timestamptz IS NULL THEN 0 ELSE 1 END, $3,
					        CASE WHEN $2 IN ('cancelled', 'completed', 'discarded') THEN now() END,
					        CASE WHEN $2 = 'scheduled' THEN now() + interval '1 hour' ELSE now() END)`,
					id, tt.job, nullableAgo(tt.attemptedAt))
				require.NoError(t, err)
			}
			before := b.enqueuer.count(t, id)
			requeued, err := b.svc.RequeueStranded(b.ctx, lock.Lease{Name: "guardian_sweep_stranded", Fence: 1})
			require.NoError(t, err)
			want := 0
			if tt.requeued {
				want = 1
			}
			require.Equal(t, want, requeued)
			require.Equal(t, want, b.enqueuer.count(t, id)-before)
			require.Equal(t, state.Pending, b.db.Fulfilment(t, id).State, "requeueing moves no state")
		})
	}

	t.Run("YoungPendingRowWaits", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.dropJobs(t, b.pay(t, "evt_1", "pi_1")) // no job in river_job, but just created
		requeued, err := b.svc.RequeueStranded(b.ctx, lock.Lease{Name: "guardian_sweep_stranded", Fence: 1})
		require.NoError(t, err)
		require.Zero(t, requeued)
	})
}
