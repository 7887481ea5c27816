package jobs_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/connector/connectortest"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/jobs"
)

// fakeLooker answers lookups with a fixed behaviour and counts them.
type fakeLooker struct {
	answer connector.Answer
	err    error
	slow   bool

	mu    sync.Mutex
	asked []string
}

func (l *fakeLooker) Lookup(ctx context.Context, key string) (connector.Answer, map[string]any, error) {
	l.mu.Lock()
	l.asked = append(l.asked, key)
	l.mu.Unlock()
	if l.slow {
		<-ctx.Done()
		return connector.CannotTell, nil, ctx.Err()
	}
	return l.answer, map[string]any{"lookup": "fake"}, l.err
}

func (l *fakeLooker) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.asked)
}

// firstUnknown answers unknown to a fulfilment's first call, done after.
func firstUnknown() *connectortest.Recorder {
	var mu sync.Mutex
	seen := map[string]bool{}
	return &connectortest.Recorder{Answer: func(_ context.Context, r connector.Request) connector.Result {
		mu.Lock()
		defer mu.Unlock()
		if seen[r.FulfilmentID] {
			return connector.Result{Outcome: state.Done}
		}
		seen[r.FulfilmentID] = true
		return connector.Result{Outcome: state.Unknown}
	}}
}

func TestAutoResolve(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name       string
		looker     *fakeLooker
		want       state.State
		wantCalls  int
		wantAnswer string
	}{
		{"DoneFulfils", &fakeLooker{answer: connector.Performed}, state.Fulfilled, 1, "done"},
		{"NotDoneRedispatchesOnce", &fakeLooker{answer: connector.NotPerformed}, state.Fulfilled, 2, "not_done"},
		{"CannotTellStays", &fakeLooker{answer: connector.CannotTell}, state.NeedsReconciliation, 1, "cannot_tell"},
		{"ErrorStays", &fakeLooker{answer: connector.Performed, err: errors.New("lookup exploded")}, state.NeedsReconciliation, 1, "cannot_tell"},
		{"SlowStays", &fakeLooker{slow: true}, state.NeedsReconciliation, 1, "cannot_tell"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := firstUnknown()
			b := setup(t, rec, true, func(c *jobs.Config) {
				c.Looker = tt.looker
				c.ReconcileGrace = time.Millisecond
				c.ReconcileBackoff = time.Hour
			})
			id := b.pay(t, "evt_1", "pi_1")
			b.waitState(t, id, state.NeedsReconciliation)

			// Run the worker as River's leader would.
			_, err := b.client.River().Insert(b.ctx, jobs.ReconcileArgs{}, nil)
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				cs, err := db.Checks(b.ctx, b.db.Pool, id)
				require.NoError(t, err)
				return len(cs) == 1
			}, 10*time.Second, 10*time.Millisecond)
			f := b.waitState(t, id, tt.want)

			cs, err := db.Checks(b.ctx, b.db.Pool, id)
			require.NoError(t, err)
			require.Equal(t, tt.wantAnswer, cs[0].Answer)
			if tt.want == state.Fulfilled && tt.wantCalls == 2 {
				require.Equal(t, 2, f.Attempt, "the re-dispatch took a new attempt")
			}
			require.Eventually(t, func() bool { return rec.CallsFor(id) == tt.wantCalls }, 5*time.Second, 10*time.Millisecond)

			// A second round right away: a settled row is not asked again, an
			// undecided one waits for its backoff.
			sum, err := b.client.Reconciler().RunChecks(b.ctx, "test reconciler")
			require.NoError(t, err)
			require.Zero(t, sum.Checked)
			require.Equal(t, 1, tt.looker.count())
			require.Equal(t, tt.wantCalls, rec.CallsFor(id), "nothing dispatched twice")
			if tt.want == state.NeedsReconciliation {
				require.NotNil(t, f.NextCheckAt)
				require.True(t, f.NextCheckAt.After(time.Now().Add(50*time.Minute)), "backed off")
			}
		})
	}

	t.Run("GraceDelaysTheFirstLookup", func(t *testing.T) {
		t.Parallel()
		looker := &fakeLooker{answer: connector.Performed}
		rec := firstUnknown()
		b := setup(t, rec, true, func(c *jobs.Config) { c.Looker = looker; c.ReconcileGrace = time.Hour })
		id := b.pay(t, "evt_1", "pi_1")
		b.waitState(t, id, state.NeedsReconciliation)
		sum, err := b.client.Reconciler().RunChecks(b.ctx, "test reconciler")
		require.NoError(t, err)
		require.Zero(t, sum.Checked)
		require.Zero(t, looker.count())
	})
}
