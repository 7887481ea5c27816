package fulfilment_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/connector/connectortest"
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
		{"DeclinedFails", connector.Declined, nil, false, state.Failed, "declined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var asked atomic.Int32
			b := setup(t, func(c *fulfilment.Config) {
				c.ConnectorTimeout = 200 * time.Millisecond
				c.ReconcileGrace = c.ConnectorTimeout
				c.ReconcileBackoff = time.Hour
				c.Looker = connectortest.LookerFunc(func(ctx context.Context, key string) (connector.Answer, map[string]any, error) {
					asked.Add(1)
					if tt.slow {
						<-ctx.Done()
						return connector.CannotTell, nil, ctx.Err()
					}
					return tt.answer, map[string]any{"lookup": "fake"}, tt.err
				})
			})
			id := b.park(t, "evt_1", "pi_1")
			b.db.Backdate(t, id, time.Now().Add(-time.Minute)) // past the grace
			enqueuedBefore := b.enqueuer.count(t, id)

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
			require.Equal(t, wantEnqueued, b.enqueuer.count(t, id)-enqueuedBefore)
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

	t.Run("InProgressIsAskedAgainAfterTheGrace", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(c *fulfilment.Config) {
			c.ReconcileGrace = 3 * time.Second
			c.ReconcileBackoff = time.Hour
			c.Looker = connectortest.LookerFunc(func(context.Context, string) (connector.Answer, map[string]any, error) {
				return connector.InProgress, nil, nil
			})
		})
		id := b.park(t, "evt_1", "pi_1")
		b.db.Backdate(t, id, time.Now().Add(-time.Minute))
		sum, err := b.svc.Reconcile(b.ctx, "test reconciler")
		require.NoError(t, err)
		require.Equal(t, 1, sum.Checked)
		f := b.db.Fulfilment(t, id)
		require.Equal(t, state.NeedsReconciliation, f.State, "in progress is neither done nor not done")
		require.NotNil(t, f.NextCheckAt)
		require.WithinDuration(t, time.Now().Add(3*time.Second), *f.NextCheckAt, 2*time.Second, "asked again after the grace, not the hour's backoff")
		require.Zero(t, b.enqueuer.count(t, id)-1, "nothing sent again while the receiver works")
	})

	// A refusal without the receiver's word (an idempotency layer's 422, a
	// framework's 400) parks the row; only the receiver's signed "not done"
	// then fails it, and frees the payment for its next key.
	t.Run("NotDoneAfterARefusalFails", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(c *fulfilment.Config) {
			c.Looker = connectortest.LookerFunc(func(context.Context, string) (connector.Answer, map[string]any, error) {
				return connector.NotPerformed, nil, nil
			})
		})
		id := b.settle(t, "evt_1", "pi_1", state.Refused, state.NeedsReconciliation)
		b.db.Backdate(t, id, time.Now().Add(-time.Minute))
		sum, err := b.svc.Reconcile(b.ctx, "test reconciler")
		require.NoError(t, err)
		require.Equal(t, 1, sum.Failed)
		require.Equal(t, state.Failed, b.db.Fulfilment(t, id).State)
		require.Equal(t, 1, b.enqueuer.count(t, id), "only the first dispatch: the same bytes would be refused again")

		// The payment's next fulfilment goes out under its next key.
		first := b.db.Fulfilment(t, id).Key
		next := b.pay(t, "evt_2", "pi_1")
		want, err := db.IdempotencyKey(b.ctx, b.db.Pool, "stripe", "pi_1", 1)
		require.NoError(t, err)
		require.Equal(t, want, b.db.Fulfilment(t, next).Key)
		require.NotEqual(t, first, want)
	})

	t.Run("GraceDelaysTheFirstLookup", func(t *testing.T) {
		t.Parallel()
		var asked atomic.Int32
		b := setup(t, func(c *fulfilment.Config) {
			c.ReconcileGrace = time.Hour
			c.Looker = connectortest.LookerFunc(func(context.Context, string) (connector.Answer, map[string]any, error) {
				asked.Add(1)
				return connector.Performed, nil, nil
			})
		})
		id := b.park(t, "evt_1", "pi_1")
		b.db.Backdate(t, id, time.Now().Add(-59*time.Minute))
		sum, err := b.svc.Reconcile(b.ctx, "test reconciler")
		require.NoError(t, err)
		require.Zero(t, sum.Checked)
		require.Zero(t, asked.Load())
		b.db.Backdate(t, id, time.Now().Add(-61*time.Minute))
		sum, err = b.svc.Reconcile(b.ctx, "test reconciler")
		require.NoError(t, err)
		require.Equal(t, 1, sum.Checked)
	})

	t.Run("GraceShorterThanTheConnectorTimeoutIsRefused", func(t *testing.T) {
		t.Parallel()
		_, err := fulfilment.New(fulfilment.Config{
			Store: &db.Store{}, Enqueuer: &enqueuer{}, Logger: slog.New(slog.DiscardHandler),
			ConnectorTimeout: time.Minute, ReconcileGrace: 30 * time.Second,
		})
		require.ErrorContains(t, err, "grace")
	})

	t.Run("AnAnswerAboutARowThatMovedIsNotRecorded", func(t *testing.T) {
		t.Parallel()
		var b *testBundle
		var id string
		b = setup(t, func(c *fulfilment.Config) {
			c.Looker = connectortest.LookerFunc(func(ctx context.Context, key string) (connector.Answer, map[string]any, error) {
				// While the lookup is out, an operator cancels the row.
				_, err := b.svc.Resolve(ctx, fulfilment.Resolution{FulfilmentID: id, Attempt: 1, To: state.Cancelled, Operator: "alice", Reason: "refunded"})
				require.NoError(t, err)
				return connector.CannotTell, nil, nil
			})
		})
		id = b.park(t, "evt_1", "pi_1")
		b.db.Backdate(t, id, time.Now().Add(-time.Hour))
		sum, err := b.svc.Reconcile(b.ctx, "test reconciler")
		require.NoError(t, err)
		require.Equal(t, 1, sum.Checked)
		require.Zero(t, b.db.Count(t, `SELECT count(*) FROM fulfilment_check`))
		require.Equal(t, state.Cancelled, b.db.Fulfilment(t, id).State)
	})

	t.Run("ARoundStartsNoLookupItCannotFinish", func(t *testing.T) {
		t.Parallel()
		var asked atomic.Int32
		b := setup(t, func(c *fulfilment.Config) {
			c.LookupTimeout = 10 * time.Second
			c.Looker = connectortest.LookerFunc(func(context.Context, string) (connector.Answer, map[string]any, error) {
				asked.Add(1)
				return connector.Performed, nil, nil
			})
		})
		id := b.park(t, "evt_1", "pi_1")
		b.db.Backdate(t, id, time.Now().Add(-time.Hour))
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		defer cancel()
		sum, err := b.svc.Reconcile(ctx, "test reconciler")
		require.NoError(t, err)
		require.Zero(t, sum.Checked)
		require.Zero(t, asked.Load())
	})

	t.Run("WithoutALookerNothingIsAsked", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.park(t, "evt_1", "pi_1")
		b.db.Backdate(t, id, time.Now().Add(-time.Hour))
		sum, err := b.svc.Reconcile(b.ctx, "test reconciler")
		require.NoError(t, err)
		require.Zero(t, sum.Checked)
		require.Equal(t, state.NeedsReconciliation, b.db.Fulfilment(t, id).State)
	})
}
