package e2e

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/db/dbtest"
)

const (
	stripeAPIKey = "sk_test_e2e_backfill_key_never_logged"
	paddleAPIKey = "pdl_sdbx_apikey_e2e_backfill_key_never_logged"
)

// paddleEventsAPI serves Paddle's GET /events with the given events, one
// page, newest first.
func paddleEventsAPI(t *testing.T, events ...map[string]any) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/events" || r.Header.Get("Authorization") != "Bearer "+paddleAPIKey {
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"error":{"type":"request_error","code":"forbidden","detail":"bad key"}}`))
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"data": events, "meta": map[string]any{"pagination": map[string]any{"per_page": 200, "has_more": false}}})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func missedPaddleEvent(id, txn string) map[string]any {
	return map[string]any{"event_id": id, "event_type": "transaction.completed", "occurred_at": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339),
		"data": map[string]any{"id": txn, "status": "completed", "origin": "web"}}
}

// stripeEventsAPI serves GET /v1/events with the given events, one page.
func stripeEventsAPI(t *testing.T, events ...map[string]any) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/events" || r.Header.Get("Authorization") != "Bearer "+stripeAPIKey {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":{"type":"invalid_request_error","message":"bad key"}}`))
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "url": "/v1/events", "has_more": false, "data": events})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func missedEvent(id, pi string) map[string]any {
	return map[string]any{"id": id, "object": "event", "type": "checkout.session.completed", "created": time.Now().Add(-time.Hour).Unix(),
		"api_version": "2025-03-31.basil", "data": map[string]any{"object": map[string]any{
			"id": "cs_" + id, "object": "checkout.session", "mode": "payment", "payment_status": "paid", "payment_intent": pi}}}
}

// TestBackfillFetchesWhatWasNeverDelivered: purchases Stripe and Paddle
// could not deliver are found by the leader's backfills at start and
// fulfilled once; `guardian backfill stripe` and `guardian backfill
// paddle` run beside them find nothing new.
func TestBackfillFetchesWhatWasNeverDelivered(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	conn := newFakeConnector(t)
	api := stripeEventsAPI(t, missedEvent("evt_missed_1", "pi_missed_1"), missedEvent("evt_missed_2", "pi_missed_2"))
	e := baseEnv(t, d, conn)
	e["GUARDIAN_STRIPE_API_KEY"] = stripeAPIKey
	e["GUARDIAN_STRIPE_API_URL"] = api.URL
	e["GUARDIAN_MODE"] = "test" // test-mode keys and fakes of the providers in test mode
	paddle := paddleEventsAPI(t, missedPaddleEvent("evt_01missed3", "txn_missed_3"))
	e["GUARDIAN_PADDLE_SECRETS"] = paddleSecret
	e["GUARDIAN_PADDLE_API_KEY"] = paddleAPIKey
	e["GUARDIAN_PADDLE_API_URL"] = paddle.URL
	g := start(t, e)
	require.Eventually(t, func() bool { return stateCount(t, d, "fulfilled") == 3 }, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, 3, d.Count(t, `SELECT count(*) FROM webhook_event WHERE origin = 'backfill'`))

	for name, want := range map[string]string{"stripe": "listed 2 stripe events", "paddle": "listed 1 paddle events"} {
		cmd := exec.Command(binary, "backfill", name, "--since", "2h")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		for k, v := range e {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
		require.Contains(t, string(out), want)
		require.Contains(t, string(out), "0 new")
		require.NotContains(t, string(out), stripeAPIKey)
		require.NotContains(t, string(out), paddleAPIKey)
	}
	g.stop(t)
	require.Equal(t, 1, conn.callsFor("pi_missed_1"))
	require.Equal(t, 1, conn.callsFor("pi_missed_2"))
	require.Equal(t, 1, conn.callsFor("txn_missed_3"))
	require.False(t, strings.Contains(g.logs(), stripeAPIKey), "the key is never logged")
	require.False(t, strings.Contains(g.logs(), paddleAPIKey), "the key is never logged")
}
