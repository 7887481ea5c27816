package jobs_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/connector/connectortest"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/jobs"
	"github.com/guardian-pay/guardian/receiver/contract"
)

func TestDispatchWorker(t *testing.T) {
	t.Parallel()

	t.Run("IntakeJobFulfilsOnce", func(t *testing.T) {
		t.Parallel()
		rec := &connectortest.Recorder{}
		b := setup(t, rec, true, options{})
		id := b.pay(t, "evt_1", "pi_1")
		f := b.db.WaitState(t, id, state.Fulfilled)
		require.Equal(t, 1, f.Attempt)
		b.waitJobs(t, `kind = 'guardian_dispatch' AND state = 'completed'`, 1)
		require.Equal(t, 1, rec.CallsFor(id), "one call, counted after the job finished")
		ts := b.db.Transitions(t, id)
		require.Regexp(t, `^dispatcher \S+ job \d+$`, ts[len(ts)-1].Actor)
	})

	t.Run("RetriedJobOnDispatchingRowParksWithoutCalling", func(t *testing.T) {
		t.Parallel()
		rec := &connectortest.Recorder{}
		b := setup(t, rec, false, options{})
		id := b.pay(t, "evt_1", "pi_1") // its job waits: the client is not started
		b.db.ForceDispatching(t, id, time.Now())
		b.start(t)
		b.db.WaitState(t, id, state.NeedsReconciliation)
		require.Zero(t, rec.CallsFor(id), "a job finding its row dispatching must not call the connector")
	})

	t.Run("UnknownFulfilmentCancelsTheJob", func(t *testing.T) {
		t.Parallel()
		rec := &connectortest.Recorder{}
		b := setup(t, rec, true, options{})
		_, err := b.client.River().Insert(b.ctx, jobs.DispatchArgs{FulfilmentID: "00000000-0000-0000-0000-000000000000"}, nil)
		require.NoError(t, err)
		b.waitJobs(t, `kind = 'guardian_dispatch' AND state = 'cancelled'`, 1)
		require.Empty(t, rec.Calls())
	})
}

// TestConnectorOutcomes runs the real HTTP connector through River, one
// receiver answer per state a dispatch can leave, and checks where the
// fulfilment lands and that the job made one call. The table of answers
// and outcomes itself is app/connector's (TestHTTPOutcomes).
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
		{"SignedDeclineFails", func(w http.ResponseWriter, r *http.Request) {
			_ = contract.WriteStatement(w, secret, http.StatusUnprocessableEntity,
				contract.Statement{IdempotencyKey: r.Header.Get("Idempotency-Key"), Status: contract.StatusDeclined}, time.Now())
		}, state.Failed},
		{"5xxParks", status(503), state.NeedsReconciliation},
		{"TimeoutParks", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body) // lets net/http notice the client leaving
			<-r.Context().Done()
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
			b := setup(t, conn, true, options{})
			id := b.pay(t, "evt_1", "pi_1")
			b.db.WaitState(t, id, tt.want)
			// Exactly one call: counted once the job has finished, so a
			// second call it made after recording the state would be seen.
			b.waitJobs(t, `kind = 'guardian_dispatch' AND state = 'completed'`, 1)
			require.Equal(t, b.db.Fulfilment(t, id).Key, <-calls)
			require.Empty(t, calls, "exactly one call")
		})
	}

	t.Run("RefusedGoesBackToPendingAndRiverRetries", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		conn, err := connector.NewHTTP(connector.HTTPConfig{URL: "http://" + addr, Secret: secret, Timeout: 300 * time.Millisecond})
		require.NoError(t, err)
		b := setup(t, conn, true, options{})
		id := b.pay(t, "evt_1", "pi_1")
		require.Eventually(t, func() bool {
			ts := b.db.Transitions(t, id)
			return len(ts) >= 3 && ts[2].From == state.Dispatching && ts[2].To == state.Pending
		}, 10*time.Second, 10*time.Millisecond)
		ts := b.db.Transitions(t, id)
		require.Contains(t, string(ts[2].Evidence), `"outcome": "not_sent"`)
		b.waitJobs(t, `kind = 'guardian_dispatch' AND state = 'retryable' AND errors IS NOT NULL`, 1)
		// A hundred tries before the sweep gives the row a new job, not
		// River's 25 (one an hour of a long outage, at MaxBackoff).
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'guardian_dispatch' AND max_attempts = 100`))

		// However often it failed before, the next attempt comes within
		// MaxBackoff: River's own backoff would wait 21^4 s (more than two
		// days) after a 21st failure. The job is made one that failed 20
		// times, by its attempt and its errors (River counts either).
		_, err = b.db.Pool.Exec(b.ctx, `UPDATE river_job SET attempt = 20, state = 'available', scheduled_at = now(),
			errors = array_fill(errors[1], ARRAY[20])
			WHERE kind = 'guardian_dispatch' AND state = 'retryable'`)
		require.NoError(t, err)
		b.waitJobs(t, `kind = 'guardian_dispatch' AND state = 'retryable' AND attempt = 21`, 1)
		var wait time.Duration
		require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT scheduled_at - attempted_at FROM river_job
			WHERE kind = 'guardian_dispatch' AND attempt = 21`).Scan(&wait))
		require.LessOrEqual(t, wait, jobs.MaxBackoff+time.Second)
		require.GreaterOrEqual(t, wait, jobs.MaxBackoff*9/10-time.Second)
	})
}
