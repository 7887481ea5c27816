package jobs_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/connector/connectortest"
	"github.com/guardian-pay/guardian/app/intake"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
	"github.com/guardian-pay/guardian/jobs"
)

type testBundle struct {
	ctx    context.Context
	db     *dbtest.DB
	client *jobs.Client
	intake *intake.Service
}

// setup starts a River client with Guardian's workers on a fresh database.
// With start false the client only inserts, so a test can arrange rows
// before any worker sees them.
func setup(t *testing.T, conn connector.Connector, start bool, opts ...func(*jobs.Config)) *testBundle {
	t.Helper()
	ctx := context.Background()
	d := dbtest.NewDB(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := jobs.Config{
		Pool: d.Pool, Connector: conn, Logger: logger,
		ConnectorTimeout: 300 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond,
	}
	for _, o := range opts {
		o(&cfg)
	}
	client, err := jobs.New(cfg)
	require.NoError(t, err)
	in, err := intake.New(intake.Config{Store: db.New(d.Pool), Enqueuer: client, Logger: logger})
	require.NoError(t, err)
	b := &testBundle{ctx: ctx, db: d, client: client, intake: in}
	if start {
		b.start(t)
	}
	return b
}

func (b *testBundle) start(t *testing.T) {
	t.Helper()
	require.NoError(t, b.client.Start(b.ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, b.client.Stop(ctx))
	})
}

// pay records a fulfilling event and returns its fulfilment id.
func (b *testBundle) pay(t *testing.T, eventID, paymentID string) string {
	t.Helper()
	res, err := b.intake.Accept(b.ctx, provider.Event{Provider: "stripe", ID: eventID, Type: "payment_intent.succeeded", PaymentID: paymentID, Payload: []byte(`{"id":"` + eventID + `"}`)})
	require.NoError(t, err)
	require.NotEmpty(t, res.FulfilmentID)
	return res.FulfilmentID
}

func (b *testBundle) waitState(t *testing.T, id string, want state.State) db.Fulfilment {
	t.Helper()
	var f db.Fulfilment
	require.Eventually(t, func() bool {
		var err error
		f, err = db.GetFulfilment(b.ctx, b.db.Pool, id)
		require.NoError(t, err)
		return f.State == string(want)
	}, 15*time.Second, 10*time.Millisecond, "fulfilment %s never reached %s (last: %s)", id, want, f.State)
	return f
}

func (b *testBundle) transitions(t *testing.T, id string) []db.Transition {
	t.Helper()
	ts, err := db.Transitions(b.ctx, b.db.Pool, id)
	require.NoError(t, err)
	return ts
}

// forceDispatching leaves a fulfilment as a crashed dispatcher would: claimed,
// attempt taken, dispatched at the given time, no outcome recorded.
func (b *testBundle) forceDispatching(t *testing.T, id string, at time.Time) {
	t.Helper()
	_, err := db.ClaimForDispatch(b.ctx, b.db.Pool, id, "crashed dispatcher", nil)
	require.NoError(t, err)
	tx, err := b.db.Pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `SET LOCAL session_replication_role = replica`)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `UPDATE fulfilment SET dispatched_at = $2 WHERE id = $1`, id, at)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))
}

func TestDispatch(t *testing.T) {
	t.Parallel()

	t.Run("FulfilsOnceWithIdempotencyKeyAndAttempt", func(t *testing.T) {
		t.Parallel()
		rec := &connectortest.Recorder{}
		b := setup(t, rec, true)
		id := b.pay(t, "evt_1", "pi_1")
		f := b.waitState(t, id, state.Fulfilled)
		require.Equal(t, 1, f.Attempt)
		calls := rec.Calls()
		require.Len(t, calls, 1)
		require.JSONEq(t, `{"id":"evt_1"}`, string(calls[0].Payload))
		calls[0].Payload = nil
		require.Equal(t, connector.Request{FulfilmentID: id, Attempt: 1, PaymentID: "pi_1", EventID: "evt_1", EventType: "payment_intent.succeeded"}, calls[0])

		ts := b.transitions(t, id)
		require.Len(t, ts, 3)
		require.Equal(t, []string{"pending", "dispatching", "fulfilled"}, []string{ts[0].To, ts[1].To, ts[2].To})
		require.Contains(t, ts[2].Actor, "dispatcher")
		require.JSONEq(t, `{"outcome":"done","connector":"recorder"}`, string(ts[2].Evidence))
	})

	t.Run("RetriedJobOnDispatchingRowParksWithoutCalling", func(t *testing.T) {
		t.Parallel()
		rec := &connectortest.Recorder{}
		b := setup(t, rec, false)
		id := b.pay(t, "evt_1", "pi_1") // its job waits: the client is not started
		b.forceDispatching(t, id, time.Now())
		b.start(t)
		f := b.waitState(t, id, state.NeedsReconciliation)
		require.Equal(t, 1, f.Attempt)
		require.Zero(t, rec.CallsFor(id), "a job finding its row dispatching must not call the connector")
		ts := b.transitions(t, id)
		require.Contains(t, ts[len(ts)-1].Reason, "outcome is unknown")
	})

	t.Run("SweepParksStaleDispatchingOnStart", func(t *testing.T) {
		t.Parallel()
		rec := &connectortest.Recorder{}
		b := setup(t, rec, false)
		id := b.pay(t, "evt_1", "pi_1")
		b.forceDispatching(t, id, time.Now().Add(-10*time.Minute))
		// Remove the dispatch job so only the sweep can move the row.
		_, err := b.db.Pool.Exec(b.ctx, `DELETE FROM river_job WHERE kind = 'guardian_dispatch'`)
		require.NoError(t, err)
		b.start(t) // the sweep runs on start, as after a restart
		b.waitState(t, id, state.NeedsReconciliation)
		require.Zero(t, rec.CallsFor(id))
		ts := b.transitions(t, id)
		last := ts[len(ts)-1]
		require.Contains(t, last.Actor, "sweeper")
		require.Contains(t, last.Reason, "lease expired")
	})

	t.Run("SweepLeavesLiveDispatchesAlone", func(t *testing.T) {
		t.Parallel()
		rec := &connectortest.Recorder{}
		b := setup(t, rec, false)
		id := b.pay(t, "evt_1", "pi_1")
		b.forceDispatching(t, id, time.Now())
		_, err := b.db.Pool.Exec(b.ctx, `DELETE FROM river_job WHERE kind = 'guardian_dispatch'`)
		require.NoError(t, err)
		b.start(t)
		_, err = b.client.River().Insert(b.ctx, jobs.SweepArgs{}, nil)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM river_job WHERE kind = 'guardian_sweep' AND state = 'completed'`).Scan(&n))
			return n >= 2
		}, 10*time.Second, 10*time.Millisecond)
		f, err := db.GetFulfilment(b.ctx, b.db.Pool, id)
		require.NoError(t, err)
		require.Equal(t, "dispatching", f.State)
	})

	t.Run("LateSuccessResolvesParkedRow", func(t *testing.T) {
		t.Parallel()
		entered := make(chan string, 1)
		release := make(chan struct{})
		rec := &connectortest.Recorder{Answer: func(ctx context.Context, req connector.Request) connector.Result {
			entered <- req.FulfilmentID
			<-release
			return connector.Result{Outcome: state.Done}
		}}
		b := setup(t, rec, true)
		id := b.pay(t, "evt_1", "pi_1")
		<-entered
		// While the call hangs, the row is parked (as the sweep would after the lease).
		_, err := db.Transit(b.ctx, b.db.Pool, db.TransitionParams{ID: id, From: "dispatching", To: "needs_reconciliation", Attempt: 1, Actor: "test sweeper", Reason: "lease expired"})
		require.NoError(t, err)
		close(release)
		b.waitState(t, id, state.Fulfilled)
		ts := b.transitions(t, id)
		require.Equal(t, "needs_reconciliation", ts[len(ts)-1].From)
		require.Contains(t, ts[len(ts)-1].Reason, "late success")
		require.Equal(t, 1, rec.CallsFor(id))
	})
}

// TestConnectorOutcomes runs the real HTTP connector against receivers that
// answer each way, and checks where the fulfilment lands.
func TestConnectorOutcomes(t *testing.T) {
	t.Parallel()

	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	status := func(code int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(code) }
	}
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    state.State
	}{
		{"2xxFulfils", status(200), state.Fulfilled},
		{"409Fulfils", status(409), state.Fulfilled},
		{"4xxFails", status(422), state.Failed},
		{"5xxParks", status(503), state.NeedsReconciliation},
		{"TimeoutParks", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body) // lets net/http notice the client leaving
			<-r.Context().Done()
		}, state.NeedsReconciliation},
		{"ResetParks", func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.(*net.TCPConn).SetLinger(0)
				_ = conn.Close()
			}
		}, state.NeedsReconciliation},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			calls := make(chan string, 10)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls <- r.Header.Get("Idempotency-Key")
				tt.handler(w, r)
			}))
			t.Cleanup(srv.Close)
			conn, err := connector.NewHTTP(connector.HTTPConfig{URL: srv.URL, Secret: secret, Timeout: 300 * time.Millisecond})
			require.NoError(t, err)
			b := setup(t, conn, true)
			id := b.pay(t, "evt_1", "pi_1")
			b.waitState(t, id, tt.want)
			require.Equal(t, id, <-calls)
			require.Empty(t, calls, "exactly one call")
		})
	}

	t.Run("RefusedGoesBackToPendingAndRetries", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		conn, err := connector.NewHTTP(connector.HTTPConfig{URL: "http://" + addr, Secret: secret, Timeout: 300 * time.Millisecond})
		require.NoError(t, err)
		b := setup(t, conn, true)
		id := b.pay(t, "evt_1", "pi_1")
		require.Eventually(t, func() bool {
			ts := b.transitions(t, id)
			return len(ts) >= 3 && ts[2].From == "dispatching" && ts[2].To == "pending"
		}, 10*time.Second, 10*time.Millisecond)
		ts := b.transitions(t, id)
		require.Contains(t, string(ts[2].Evidence), `"outcome": "not_sent"`)
		var state string
		require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT state FROM river_job WHERE kind = 'guardian_dispatch'`).Scan(&state))
		require.Contains(t, []string{"retryable", "available", "running"}, state, "River keeps the job for another attempt")
	})
}
