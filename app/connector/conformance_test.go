package connector

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/receiver/contract"
)

// memReceiver is an in-memory receiver that keeps the contract, unless bug
// names the rule it breaks. (receiver is the real kit; its example's
// test runs the same conformance against Postgres.)
type memReceiver struct {
	bug string

	mu        sync.Mutex
	finished  map[string]memKey
	inflight  map[string]bool
	acts      int
	providers map[string]int // the provider each delivery named
}

type memKey struct {
	hash [32]byte
	st   contract.Statement
}

func (m *memReceiver) serve(t *testing.T) *httptest.Server {
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	m.finished, m.inflight, m.providers = map[string]memKey{}, map[string]bool{}, map[string]int{}
	state := func(w http.ResponseWriter, code int, st contract.Statement) {
		require.NoError(t, contract.WriteStatement(w, secret, code, st, time.Now()))
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if m.bug != "no_verify" && wh.Verify(body, r.Header) != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if key, ok := strings.CutPrefix(r.URL.Path, "/lookup/"); ok {
			m.mu.Lock()
			k, done := m.finished[key]
			busy := m.inflight[key]
			m.mu.Unlock()
			switch {
			case done:
				state(w, 200, contract.Statement{IdempotencyKey: key, Status: k.st.Status, Receipt: k.st.Receipt})
			case busy && m.bug != "not_done_in_progress":
				state(w, 200, contract.Statement{IdempotencyKey: key, Status: contract.StatusInProgress})
			default:
				state(w, 200, contract.Statement{IdempotencyKey: key, Status: contract.StatusNotDone})
			}
			return
		}
		var b contract.Body
		require.NoError(t, json.Unmarshal(body, &b))
		if (b.EventType == contract.TestEventType) != strings.HasPrefix(b.IdempotencyKey, contract.TestKeyPrefix) && m.bug != "no_test_guard" {
			http.Error(w, "test deliveries use test keys, and only they do", http.StatusBadRequest)
			return
		}
		m.mu.Lock()
		m.providers[b.Provider]++
		m.mu.Unlock()
		var p contract.TestPayload
		require.NoError(t, json.Unmarshal(b.Payload, &p))
		key, hash := b.IdempotencyKey, sha256.Sum256(body)
		m.mu.Lock()
		if k, ok := m.finished[key]; ok && !(m.bug == "forgets_declines" && k.st.Status == contract.StatusDeclined) {
			m.mu.Unlock()
			switch {
			case m.bug == "409_for_done":
				state(w, http.StatusConflict, contract.Statement{IdempotencyKey: key, Status: contract.StatusInProgress})
			case k.hash != hash:
				state(w, http.StatusUnprocessableEntity, contract.Statement{IdempotencyKey: key, Status: contract.StatusMismatch})
			case k.st.Status == contract.StatusDeclined:
				state(w, http.StatusUnprocessableEntity, k.st)
			default:
				state(w, http.StatusOK, k.st)
			}
			return
		}
		if m.inflight[key] && m.bug != "acts_twice" {
			m.mu.Unlock()
			state(w, http.StatusConflict, contract.Statement{IdempotencyKey: key, Status: contract.StatusInProgress})
			return
		}
		m.inflight[key] = true
		m.acts++
		receipt := fmt.Sprintf("rcpt_%d", m.acts)
		m.mu.Unlock()
		time.Sleep(time.Duration(p.HoldMillis) * time.Millisecond)
		st, code := contract.Statement{IdempotencyKey: key, Status: contract.StatusDone, Receipt: receipt}, http.StatusOK
		if p.Decline {
			st, code = contract.Statement{IdempotencyKey: key, Status: contract.StatusDeclined, Reason: "asked"}, http.StatusUnprocessableEntity
		}
		m.mu.Lock()
		m.finished[key], m.inflight[key] = memKey{hash: hash, st: st}, false
		m.mu.Unlock()
		state(w, code, st)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestConform(t *testing.T) {
	t.Parallel()
	tests := []struct {
		bug string
		// failing names the steps that must fail, with a word of their
		// verdicts; every other step must pass.
		failing map[string]string
	}{
		{"", nil},
		{"acts_twice", map[string]string{"one key sent twice at once": "ACTED TWICE", "a key sent again while in progress": "ACTED TWICE"}},
		{"409_for_done", map[string]string{"a finished key sent again": "409 for a finished key", "a finished key with another body": "answered 409",
			"a declined key sent again": `want a signed "declined"`, "a declined key sent with a body that would act": "answered 409"}},
		{"forgets_declines", map[string]string{"a declined key sent with a body that would act": "ACTED on a declined key", "lookup of a declined key": "answered done"}},
		{"no_verify", map[string]string{"request signed with a wrong secret": "ACCEPTED", "request signed 10 minutes ago (a replay)": "ACCEPTED"}},
		{"not_done_in_progress", map[string]string{"lookup of a key in progress": "answered not_done"}},
		{"no_test_guard", map[string]string{"test delivery under a key without the gtest_ prefix": "ACCEPTED"}},
	}
	for _, tt := range tests {
		t.Run("Bug="+tt.bug, func(t *testing.T) {
			t.Parallel()
			m := &memReceiver{bug: tt.bug}
			srv := m.serve(t)
			c, err := NewHTTP(HTTPConfig{URL: srv.URL + "/act", Secret: secret, Timeout: 5 * time.Second, LookupURL: srv.URL + "/lookup/{key}"})
			require.NoError(t, err)
			steps := c.Conform(t.Context(), "paddle")
			if tt.bug == "" {
				require.Len(t, steps, 14)
				m.mu.Lock()
				require.Len(t, m.providers, 1, "every test delivery names the provider asked for: %v", m.providers)
				require.Positive(t, m.providers["paddle"])
				m.mu.Unlock()
			}
			failed := 0
			for _, s := range steps {
				if word, ok := tt.failing[s.Name]; ok {
					require.False(t, s.OK, "%s: %s", s.Name, s.Verdict)
					require.Contains(t, s.Verdict, word, s.Name)
					failed++
					continue
				}
				require.True(t, s.OK, "%s: %s", s.Name, s.Verdict)
			}
			require.Equal(t, len(tt.failing), failed, "every broken rule is reported: %+v", steps)
		})
	}

	t.Run("WithoutALookupURL", func(t *testing.T) {
		t.Parallel()
		srv := (&memReceiver{}).serve(t)
		steps := newHTTP(t, srv.URL, 5*time.Second).Conform(t.Context(), "stripe")
		for _, s := range steps {
			if strings.HasPrefix(s.Name, "lookup") {
				require.False(t, s.OK)
				require.Contains(t, s.Verdict, "no lookup URL configured")
			}
		}
	})
}
