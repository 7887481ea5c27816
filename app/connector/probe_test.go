package connector

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
)

// receiver is a test receiver: it verifies (or not) each action request,
// records what it would act on, and answers lookups.
type receiver struct {
	verify   bool
	action   int // status for a verified action request
	lookup   string
	mu       sync.Mutex
	actedOn  []string
	received int
}

func (rc *receiver) serve(t *testing.T) *httptest.Server {
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.HasPrefix(r.URL.Path, "/lookup/") {
			key := strings.TrimPrefix(r.URL.Path, "/lookup/")
			if wh.Verify(body, r.Header) != nil {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			out, h, err := SignLookupAnswer(secret, key, rc.lookup, time.Now())
			require.NoError(t, err)
			for k, v := range h {
				w.Header()[k] = v
			}
			_, _ = w.Write(out)
			return
		}
		rc.mu.Lock()
		defer rc.mu.Unlock()
		rc.received++
		if rc.verify && wh.Verify(body, r.Header) != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var call struct {
			EventType string `json:"event_type"`
			PaymentID string `json:"payment_id"`
		}
		require.NoError(t, json.Unmarshal(body, &call))
		if call.EventType != TestEventType {
			rc.actedOn = append(rc.actedOn, call.PaymentID)
		}
		w.WriteHeader(rc.action)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestProbe(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		rc      *receiver
		signed  bool
		wantOK  []bool
		verdict []string
	}{
		{"VerifyingReceiver", &receiver{verify: true, action: 200, lookup: LookupNotDone}, true, []bool{true, true, true},
			[]string{"verifies signatures", "verified the signature", "answered not done"}},
		{"DefaultSendsNoSignedAction", &receiver{verify: true, action: 200, lookup: LookupNotDone}, false, []bool{true, true},
			[]string{"verifies signatures", "answered not done"}},
		{"NotVerifying", &receiver{verify: false, action: 200, lookup: LookupNotDone}, false, []bool{false, true},
			[]string{"does not verify signatures", "answered not done"}},
		{"LookupSaysDoneForAnything", &receiver{verify: true, action: 200, lookup: LookupDone}, false, []bool{true, false},
			[]string{"verifies signatures", "cannot be trusted"}},
		{"BusinessRefusalOfTheTest", &receiver{verify: true, action: 422, lookup: "unknown"}, true, []bool{true, true, false},
			[]string{"verifies signatures", "business refusal", "cannot tell"}},
		{"WrongRoute", &receiver{verify: true, action: 404, lookup: LookupNotDone}, true, []bool{true, false, true},
			[]string{"verifies signatures", "refused before the receiver's logic", "answered not done"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rc := tt.rc
			srv := rc.serve(t)
			h, err := NewHTTP(HTTPConfig{URL: srv.URL + "/act", Secret: secret, Timeout: 2 * time.Second, LookupURL: srv.URL + "/lookup/{key}"})
			require.NoError(t, err)
			steps := h.Probe(t.Context(), ProbeOptions{Signed: tt.signed})
			require.Len(t, steps, len(tt.wantOK))
			for i, s := range steps {
				require.Equal(t, tt.wantOK[i], s.OK, "%s: %s", s.Name, s.Verdict)
				require.Contains(t, s.Verdict, tt.verdict[i])
			}
			wantReceived := 1
			if tt.signed {
				wantReceived = 2
			}
			require.Equal(t, wantReceived, rc.received, "one wrong-signature request, and the signed one only when asked")
			require.Empty(t, rc.actedOn, "a test request names no payment to act on")
		})
	}
}

// TestProbeWithoutLookup: no lookup URL, no lookup step.
func TestProbeWithoutLookup(t *testing.T) {
	t.Parallel()
	rc := &receiver{verify: true, action: 200}
	srv := rc.serve(t)
	h := newHTTP(t, srv.URL, 2*time.Second)
	steps := h.Probe(t.Context(), ProbeOptions{})
	require.Len(t, steps, 1)
	require.True(t, steps[0].OK)
	require.Equal(t, http.StatusUnauthorized, steps[0].Status)
}
