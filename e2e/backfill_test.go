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

const stripeAPIKey = "sk_test_e2e_backfill_key_never_logged"

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

// TestBackfillFetchesWhatWasNeverDelivered: a purchase Stripe could not
// deliver is found by the leader's backfill at start and fulfilled once;
// `guardian backfill stripe` run beside it finds nothing new.
func TestBackfillFetchesWhatWasNeverDelivered(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	conn := newFakeConnector(t)
	api := stripeEventsAPI(t, missedEvent("evt_missed_1", "pi_missed_1"), missedEvent("evt_missed_2", "pi_missed_2"))
	e := baseEnv(t, d, conn)
	e["GUARDIAN_STRIPE_API_KEY"] = stripeAPIKey
	e["GUARDIAN_STRIPE_API_URL"] = api.URL
	e["GUARDIAN_MODE"] = "test" // a test-mode key and a fake of Stripe in test mode
	g := start(t, e)
	require.Eventually(t, func() bool { return stateCount(t, d, "fulfilled") == 2 }, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, 2, d.Count(t, `SELECT count(*) FROM webhook_event WHERE origin = 'backfill'`))

	cmd := exec.Command(binary, "backfill", "stripe", "--since", "2h")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range e {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "listed 2 events")
	require.Contains(t, string(out), "0 new")
	require.NotContains(t, string(out), stripeAPIKey)
	g.stop(t)
	require.Equal(t, 1, conn.callsFor("pi_missed_1"))
	require.Equal(t, 1, conn.callsFor("pi_missed_2"))
	require.False(t, strings.Contains(g.logs(), stripeAPIKey), "the key is never logged")
}
