package jobs_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/connector/connectortest"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/metrics"
	"github.com/guardian-pay/guardian/app/metrics/metricstest"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/refusals"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/app/tokens"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/jobs"
)

func TestSweeps(t *testing.T) {
	t.Parallel()

	t.Run("SweepRunsOnStart", func(t *testing.T) {
		t.Parallel()
		rec := &connectortest.Recorder{}
		b := setup(t, rec, false, options{})
		id := b.pay(t, "evt_1", "pi_1")
		b.db.ForceDispatching(t, id, time.Now().Add(-10*time.Minute))
		// Remove the dispatch job so only the sweep can move the row.
		_, err := b.db.Pool.Exec(b.ctx, `DELETE FROM river_job WHERE kind = 'guardian_dispatch'`)
		require.NoError(t, err)
		b.start(t) // the sweep runs on start, as after a restart
		b.db.WaitState(t, id, state.NeedsReconciliation)
		require.Zero(t, rec.CallsFor(id))
		ts := b.db.Transitions(t, id)
		require.Regexp(t, `^sweeper `, ts[len(ts)-1].Actor)
	})

	// Each sweep is its own service: its own periodic job, its own lock
	// (and fence), its own count of rounds and rows.
	t.Run("EachSweepIsItsOwnService", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		m, err := metrics.New(reg, nil, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		b := setup(t, &connectortest.Recorder{}, false, options{Jobs: func(c *jobs.Config) { c.Metrics = m }})
		// A pending row whose job is gone, an hour old: only sweep_stranded
		// gives it one.
		id := b.pay(t, "evt_1", "pi_1")
		_, err = b.db.Pool.Exec(b.ctx, `DELETE FROM river_job WHERE kind = 'guardian_dispatch'`)
		require.NoError(t, err)
		b.db.Backdate(t, id, time.Now().Add(-time.Hour))
		b.start(t)
		b.db.WaitState(t, id, state.Fulfilled)
		for _, name := range []string{"sweep_stale", "sweep_reversed", "sweep_stranded"} {
			b.waitJobs(t, `kind = 'guardian_maintain' AND args->>'service' = '`+name+`' AND state = 'completed'`, 1)
			require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM lock_fence WHERE name = $1`, "guardian_"+name), "%s writes under a fence of its own", name)
			require.Equal(t, 1.0, metricstest.Value(t, reg, "guardian_maintenance_runs_total", map[string]string{"service": name, "outcome": "ok"}), name)
		}
		require.Equal(t, 1.0, metricstest.Value(t, reg, "guardian_maintenance_rows_total", map[string]string{"service": "sweep_stranded"}), "the stranded row, counted by its service")
	})
}

// TestPruners: the leader's housekeeping, each table its own service.
func TestPruners(t *testing.T) {
	t.Parallel()

	t.Run("PrunesTokensExpiredADayAgo", func(t *testing.T) {
		t.Parallel()
		var pruner tokens.Postgres
		b := setup(t, &connectortest.Recorder{}, false, options{Jobs: func(c *jobs.Config) { c.Tokens = &pruner }})
		pruner.Store = db.New(b.db.Pool)
		for name, expired := range map[string]time.Duration{"old": -25 * time.Hour, "recent": -time.Hour, "live": time.Hour} {
			require.NoError(t, pruner.Put(b.ctx, tokens.Hash(name), tokens.Record{Purpose: "test", Payload: []byte(`{}`), ExpiresAt: time.Now().Add(expired)}))
		}
		b.start(t)
		b.waitJobs(t, `kind = 'guardian_maintain' AND args->>'service' = 'prune_tokens' AND state = 'completed'`, 1)
		require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM single_use_token`))
		require.Zero(t, b.db.Count(t, `SELECT count(*) FROM single_use_token WHERE hash = $1`, tokens.Hash("old")))
	})

	t.Run("PrunesRefusalsOlderThanTheRetention", func(t *testing.T) {
		t.Parallel()
		pruner := &laterStore{}
		b := setup(t, &connectortest.Recorder{}, false, options{Jobs: func(c *jobs.Config) { c.Refusals = pruner }})
		pruner.Store = db.New(b.db.Pool)
		require.NoError(t, db.InsertRefusals(b.ctx, b.db.Pool, []db.Refusal{
			{At: time.Now().Add(-refusals.Retention - time.Hour), Provider: "stripe", Reason: "signature"},
			{At: time.Now().Add(-time.Hour), Provider: "stripe", Reason: "timestamp"},
		}))
		b.start(t)
		b.waitJobs(t, `kind = 'guardian_maintain' AND args->>'service' = 'prune_refusals' AND state = 'completed'`, 1)
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM refused_delivery`))
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM refused_delivery WHERE reason = 'timestamp'`), "the recent one stays")
	})
}

func TestPruneBodies(t *testing.T) {
	t.Parallel()
	pruner := &laterStore{}
	b := setup(t, &connectortest.Recorder{}, false, options{Jobs: func(c *jobs.Config) {
		c.Bodies, c.PayloadRetention = pruner, 96*time.Hour
	}})
	pruner.Store = db.New(b.db.Pool)
	_, err := b.db.Pool.Exec(b.ctx, `INSERT INTO webhook_event (provider, event_id, event_type, body, first_seen_at)
		VALUES ('stripe', 'evt_old', 'customer.created', '{"email":"ana@example.com"}', now() - interval '100 days'),
		       ('stripe', 'evt_new', 'customer.created', '{"email":"bo@example.com"}', now())`)
	require.NoError(t, err)
	b.start(t)
	b.waitJobs(t, `kind = 'guardian_maintain' AND args->>'service' = 'prune_bodies' AND state = 'completed'`, 1)
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE pruned_at IS NOT NULL AND body = '' AND event_id = 'evt_old'`))
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE pruned_at IS NULL AND event_id = 'evt_new'`), "a recent body stays")
}

// laterStore is a db.Store set once the test's database exists.
type laterStore struct{ *db.Store }

// TestTallyWorkerFolds: the leader folds the dispatch outcomes' changes
// into the settled states' tally and the outcomes' minutes.
func TestTallyWorkerFolds(t *testing.T) {
	t.Parallel()
	folder := &laterStore{}
	b := setup(t, &connectortest.Recorder{}, false, options{Jobs: func(c *jobs.Config) { c.Tally = folder }})
	folder.Store = db.New(b.db.Pool)
	ids := []string{b.pay(t, "evt_1", "pi_1"), b.pay(t, "evt_2", "pi_2")}
	b.start(t)
	for _, id := range ids {
		b.db.WaitState(t, id, state.Fulfilled)
	}
	b.waitJobs(t, `kind = 'guardian_tally' AND state = 'completed'`, 1)
	// The fold on start may have run before the outcomes: wait for one
	// after them, by asking River for another round.
	_, err := b.client.River().Insert(b.ctx, jobs.TallyArgs{}, nil)
	require.NoError(t, err)
	b.waitJobs(t, `kind = 'guardian_tally' AND state = 'completed'`, 2)
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM fulfilment_change`), "every change folded")
	require.Equal(t, 2, b.db.Count(t, `SELECT n FROM fulfilment_tally WHERE state = 'fulfilled' AND action = 'fulfil'`))
	require.Equal(t, 2, b.db.Count(t, `SELECT sum(n) FROM dispatch_outcome_minute WHERE to_state = 'fulfilled'`))
	st, err := db.GetStats(b.ctx, b.db.Pool)
	require.NoError(t, err)
	require.Equal(t, 2, st.ByState[state.Fulfilled])
}

func TestReconcileWorker(t *testing.T) {
	t.Parallel()
	var called atomic.Bool
	rec := &connectortest.Recorder{Answer: func(context.Context, connector.Request) connector.Result {
		if !called.Swap(true) {
			return connector.Result{Outcome: state.Unknown}
		}
		return connector.Result{Outcome: state.Done}
	}}
	looker := connectortest.LookerFunc(func(context.Context, string) (connector.Answer, map[string]any, error) {
		return connector.NotPerformed, map[string]any{"lookup": "fake"}, nil
	})
	b := setup(t, rec, true, options{
		Fulfilment: func(c *fulfilment.Config) { c.Looker = looker; c.ReconcileGrace = c.ConnectorTimeout },
		Jobs:       func(c *jobs.Config) { c.ReconcileInterval = time.Hour },
	})
	id := b.pay(t, "evt_1", "pi_1")
	b.db.WaitState(t, id, state.NeedsReconciliation)
	b.db.Backdate(t, id, time.Now().Add(-time.Hour)) // past the grace
	// Run a round as River's leader would: not done sends it again.
	_, err := b.client.River().Insert(b.ctx, jobs.ReconcileArgs{}, nil)
	require.NoError(t, err)
	f := b.db.WaitState(t, id, state.Fulfilled)
	require.Equal(t, 2, f.Attempt)
	require.Equal(t, 2, rec.CallsFor(id))
}

// TestNoPendingRowIsStranded takes a pending fulfilment's dispatch job away
// in each way River and its operators can, and checks that the sweep gives
// the row a new job that fulfils it, once.
func TestNoPendingRowIsStranded(t *testing.T) {
	t.Parallel()

	cases := []struct {
		name string
		lose func(t *testing.T, b *testBundle, jobID int64)
	}{
		{"CancelledInRiverUI", func(t *testing.T, b *testBundle, jobID int64) {
			_, err := b.client.River().JobCancel(b.ctx, jobID)
			require.NoError(t, err)
		}},
		{"DeletedInRiverUI", func(t *testing.T, b *testBundle, jobID int64) {
			_, err := b.client.River().JobDelete(b.ctx, jobID)
			require.NoError(t, err)
		}},
		{"RetriesExhausted", func(t *testing.T, b *testBundle, jobID int64) {
			_, err := b.db.Pool.Exec(b.ctx, `UPDATE river_job SET state = 'discarded', attempt = max_attempts, finalized_at = now() WHERE id = $1`, jobID)
			require.NoError(t, err)
		}},
		{"FetchAnswerLostWithTheConnection", func(t *testing.T, b *testBundle, jobID int64) {
			// What a fetch leaves when its answer never reaches the worker:
			// running, attempt 1, attempted at the moment of the cut (20 s
			// ago: past the job's timeout, well inside River's 5-minute
			// rescue, which this test leaves at its default).
			_, err := b.db.Pool.Exec(b.ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() - interval '20 seconds', attempted_by = '{lost}' WHERE id = $1`, jobID)
			require.NoError(t, err)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := &connectortest.Recorder{}
			b := setup(t, rec, false, sweepEverySecond)
			id := b.pay(t, "evt_1", "pi_1")
			var jobID int64
			require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT id FROM river_job WHERE kind = 'guardian_dispatch'`).Scan(&jobID))
			tc.lose(t, b, jobID)
			b.db.Backdate(t, id, time.Now().Add(-time.Hour))

			start := time.Now()
			b.start(t)
			b.db.WaitState(t, id, state.Fulfilled)
			// Bound: the sweep runs on start and then every SweepInterval;
			// one run is enough.
			t.Logf("recovered in %s", time.Since(start).Round(time.Millisecond))
			require.Equal(t, 1, rec.CallsFor(id))
			require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment_transition WHERE fulfilment_id = $1 AND to_state = 'dispatching'`, id))
		})
	}
}

// sweepEverySecond: the production dispatch lease, and a sweep every
// second, so a stranded row's recovery is the sweep's and comes quickly.
var sweepEverySecond = options{
	Fulfilment: func(c *fulfilment.Config) { c.DispatchLease = fulfilment.DefaultDispatchLease },
	Jobs:       func(c *jobs.Config) { c.SweepInterval = time.Second },
}

// TestARevocationIsNeverStranded: a revocation whose dispatch job an
// operator cancels in River UI gets a new one from the sweep, like any
// pending row, and takes the payment back once.
func TestARevocationIsNeverStranded(t *testing.T) {
	t.Parallel()
	rec := &connectortest.Recorder{}
	b := setup(t, rec, false, sweepEverySecond)
	id := b.pay(t, "evt_1", "pi_1")
	_, err := b.service.Dispatch(b.ctx, fulfilment.DispatchRequest{FulfilmentID: id, Actor: "test dispatcher"})
	require.NoError(t, err)
	b.db.WaitState(t, id, state.Fulfilled)
	refund := provider.Reversal{PaymentID: "pi_1", Kind: provider.Refund, Full: true}
	_, err = b.service.Accept(b.ctx, provider.Event{Provider: "stripe", ID: "evt_refund", Type: "charge.refunded", Reversal: &refund, Payload: []byte(`{"id":"evt_refund"}`)})
	require.NoError(t, err)
	var revocation string
	require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT id FROM fulfilment WHERE action = 'revoke'`).Scan(&revocation))
	var jobID int64
	require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT id FROM river_job WHERE kind = 'guardian_dispatch' AND args ->> 'fulfilment_id' = $1`, revocation).Scan(&jobID))
	_, err = b.client.River().JobCancel(b.ctx, jobID)
	require.NoError(t, err)
	b.db.Backdate(t, revocation, time.Now().Add(-time.Hour))

	b.start(t)
	b.db.WaitState(t, revocation, state.Fulfilled)
	require.Equal(t, 1, rec.CallsFor(revocation))
	require.Equal(t, state.Revoke, rec.Calls()[len(rec.Calls())-1].Action)
	require.Equal(t, 1, rec.CallsFor(id), "the fulfilment was not sent again")
}
