package connector

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/receiver/contract"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

var req = Request{Key: "gk1_0b6f3c388a7e4a579d0e2d1f4f6a4b11aa55", FulfilmentID: "0b6f3c38-8a7e-4a57-9d0e-2d1f4f6a4b11", Attempt: 1, Provider: "stripe", PaymentID: "pi_1", EventID: "evt_1", EventType: "payment_intent.succeeded", Payload: json.RawMessage(`{"id":"evt_1"}`)}

// stating answers code with the statement st about key, signed with
// withSecret at at.
func stating(code int, st contract.Statement, withSecret string, at time.Time) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_ = contract.WriteStatement(w, withSecret, code, st, at)
	}
}

const otherSecret = "whsec_b3RoZXIgc2VjcmV0IG9mIGFub3RoZXIgcmVjZWl2ZXI="

func newHTTP(t *testing.T, url string, timeout time.Duration) *HTTP {
	t.Helper()
	c, err := NewHTTP(HTTPConfig{URL: url, Secret: secret, Timeout: timeout})
	require.NoError(t, err)
	return c
}

func TestHTTPOutcomes(t *testing.T) {
	t.Parallel()

	status := func(code int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(code) }
	}
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    state.Outcome
	}{
		{"OK", status(200), state.Done},
		{"Created", status(201), state.Done},
		// 409 is "a request with this key is still being processed" (the
		// IETF Idempotency-Key draft): not known yet, never done.
		{"ConflictIsInProgressNotDone", status(409), state.Unknown},
		{"SignedInProgressConflictUnknown", stating(409, contract.Statement{IdempotencyKey: req.Key, Status: contract.StatusInProgress}, secret, time.Now()), state.Unknown},
		// A status alone never frees a payment: a framework, a proxy or an
		// idempotency layer (422: key reused with another body) answers
		// these without saying anything about the key.
		{"BadRequestRefused", status(400), state.Refused},
		{"UnprocessableRefused", status(422), state.Refused},
		{"PaymentRequiredRefused", status(402), state.Refused},
		{"GoneRefused", status(410), state.Refused},
		{"SignedDeclineDeclines", stating(422, contract.Statement{IdempotencyKey: req.Key, Status: contract.StatusDeclined, Reason: "card blocked"}, secret, time.Now()), state.Declined},
		{"SignedDeclineWithBadRequestDeclines", stating(400, contract.Statement{IdempotencyKey: req.Key, Status: contract.StatusDeclined}, secret, time.Now()), state.Declined},
		{"SignedMismatchRefused", stating(422, contract.Statement{IdempotencyKey: req.Key, Status: contract.StatusMismatch}, secret, time.Now()), state.Refused},
		{"DeclineForAnotherKeyRefused", stating(422, contract.Statement{IdempotencyKey: "gk1_other", Status: contract.StatusDeclined}, secret, time.Now()), state.Refused},
		{"DeclineSignedWithAnotherSecretRefused", stating(422, contract.Statement{IdempotencyKey: req.Key, Status: contract.StatusDeclined}, otherSecret, time.Now()), state.Refused},
		{"StaleDeclineRefused", stating(422, contract.Statement{IdempotencyKey: req.Key, Status: contract.StatusDeclined}, secret, time.Now().Add(-time.Hour)), state.Refused},
		{"UnsignedDeclineRefused", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(422)
			_, _ = w.Write([]byte(`{"idempotency_key":"` + req.Key + `","status":"declined"}`))
		}, state.Refused},
		{"DeclineWithServerErrorUnknown", stating(500, contract.Statement{IdempotencyKey: req.Key, Status: contract.StatusDeclined}, secret, time.Now()), state.Unknown},
		{"UnauthorizedNotDelivered", status(401), state.NotDelivered},
		{"ForbiddenNotDelivered", status(403), state.NotDelivered},
		{"NotFoundNotDelivered", status(404), state.NotDelivered},
		{"MethodNotAllowedNotDelivered", status(405), state.NotDelivered},
		{"ProxyAuthNotDelivered", status(407), state.NotDelivered},
		{"TooLargeNotDelivered", status(413), state.NotDelivered},
		{"MediaTypeNotDelivered", status(415), state.NotDelivered},
		{"MisdirectedNotDelivered", status(421), state.NotDelivered},
		{"RequestTimeoutUnknown", status(408), state.Unknown},
		{"TooEarlyUnknown", status(425), state.Unknown},
		{"TooManyRequestsUnknown", status(429), state.Unknown},
		{"ServerErrorUnknown", status(500), state.Unknown},
		{"BadGatewayUnknown", status(502), state.Unknown},
		{"RedirectUnknown", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/elsewhere", http.StatusFound) }, state.Unknown},
		{"ResetUnknown", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body)
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.(*net.TCPConn).SetLinger(0)
				_ = conn.Close()
			}
		}, state.Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(tt.handler)
			defer srv.Close()
			res := newHTTP(t, srv.URL, 5*time.Second).Fulfil(context.Background(), req)
			require.Equal(t, tt.want, res.Outcome, "evidence: %v", res.Evidence)
		})
	}

	t.Run("TimeoutUnknown", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
		defer srv.Close()
		defer close(release)
		res := newHTTP(t, srv.URL, 100*time.Millisecond).Fulfil(context.Background(), req)
		require.Equal(t, state.Unknown, res.Outcome)
		require.Equal(t, "timeout", res.Evidence["error"])
	})

	t.Run("RefusedIsNotSent", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		res := newHTTP(t, "http://"+addr, time.Second).Fulfil(context.Background(), req)
		require.Equal(t, state.NotSent, res.Outcome, "evidence: %v", res.Evidence)
		require.Equal(t, ClassRefused, res.Evidence["error"], "the class, one of a closed set, may label metrics")
		require.Contains(t, res.Evidence["detail"], "connection refused", "the detail stays in the evidence")
		require.Contains(t, ErrorClasses, res.Evidence["error"])
	})
}

func TestHTTPRequest(t *testing.T) {
	t.Parallel()

	var calls atomic.Int32
	var got http.Header
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		got = r.Header.Clone()
		body, _ = io.ReadAll(r.Body)
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil || wh.Verify(body, r.Header) != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()

	c := newHTTP(t, srv.URL, time.Second)
	res := c.Fulfil(context.Background(), req)
	require.Equal(t, state.Done, res.Outcome, "the receiver verifies the Standard Webhooks signature")
	require.EqualValues(t, 1, calls.Load())
	require.Equal(t, req.Key, got.Get("Idempotency-Key"))
	require.Equal(t, req.Key, got.Get("Webhook-Id"), "every attempt is the same message")
	require.Equal(t, "1", got.Get("Guardian-Attempt"))
	var sent contract.Body
	require.NoError(t, json.Unmarshal(body, &sent))
	require.Equal(t, contract.Body{IdempotencyKey: req.Key, Provider: "stripe", PaymentID: "pi_1", EventID: "evt_1", EventType: "payment_intent.succeeded", Payload: json.RawMessage(`{"id":"evt_1"}`)}, sent)
	require.NotContains(t, res.Evidence, "secret")

	t.Run("EveryAttemptSendsTheSameBytes", func(t *testing.T) {
		// An idempotency layer refuses a key reused with another body
		// (422): attempt 2 must be attempt 1's request again.
		first := body
		again := req
		again.Attempt, again.FulfilmentID = 2, "f8a1a4c2-0000-4000-8000-000000000002"
		require.Equal(t, state.Done, c.Fulfil(context.Background(), again).Outcome)
		require.Equal(t, string(first), string(body))
		require.Equal(t, "2", got.Get("Guardian-Attempt"))
	})
}

func TestHTTPHandsOnTheExactPayload(t *testing.T) {
	t.Parallel()
	// As a provider may sign it: spacing, an escaped NUL, HTML characters,
	// keys in its own order. jsonb and json.Marshal would each change it.
	payload := []byte("{ \"id\" : \"evt_1\",\n  \"note\": \"a\\u0000b <b>&</b>\", \"amount\": 1.50 }")
	var got []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
	}))
	defer srv.Close()
	r := req
	r.Payload = payload
	require.Equal(t, state.Done, newHTTP(t, srv.URL, time.Second).Fulfil(context.Background(), r).Outcome)
	require.True(t, bytes.Contains(got, append([]byte(`"payload":`), payload...)), "the payload left as signed: %s", got)
	var sent contract.Body
	require.NoError(t, json.Unmarshal(got, &sent), "the body is still JSON")
	require.Equal(t, r.Key, sent.IdempotencyKey)
}

func TestNewHTTPValidates(t *testing.T) {
	t.Parallel()
	for _, cfg := range []HTTPConfig{
		{URL: "", Secret: secret},
		{URL: "ftp://x", Secret: secret},
		{URL: "http://127.0.0.1:1", Secret: ""},
		{URL: "http://127.0.0.1:1", Secret: "whsec_"},
		{URL: "http://127.0.0.1:1", Secret: "whsec_!!"},
	} {
		_, err := NewHTTP(cfg)
		require.Error(t, err, "%+v", cfg)
	}
}

func TestHTTPLookup(t *testing.T) {
	t.Parallel()

	signed := func(key, status, withSecret string, at time.Time) http.HandlerFunc {
		return stating(http.StatusOK, contract.Statement{IdempotencyKey: key, Status: status}, withSecret, at)
	}
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    Answer
	}{
		{"SignedDone", signed(req.FulfilmentID, contract.StatusDone, secret, time.Now()), Performed},
		{"SignedNotDone", signed(req.FulfilmentID, contract.StatusNotDone, secret, time.Now()), NotPerformed},
		{"SignedInProgress", signed(req.FulfilmentID, contract.StatusInProgress, secret, time.Now()), InProgress},
		{"SignedDeclined", signed(req.FulfilmentID, contract.StatusDeclined, secret, time.Now()), Declined},
		{"SignedOtherStatus", signed(req.FulfilmentID, "processing", secret, time.Now()), CannotTell},
		{"BareNotFoundCannotTell", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(404) }, CannotTell},
		{"UnsignedNotDoneCannotTell", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(`{"idempotency_key":"` + req.FulfilmentID + `","status":"not_done"}`))
		}, CannotTell},
		{"UnsignedDoneCannotTell", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(`{"status":"done"}`)) }, CannotTell},
		{"OtherSecretCannotTell", signed(req.FulfilmentID, contract.StatusNotDone, otherSecret, time.Now()), CannotTell},
		{"StaleAnswerCannotTell", signed(req.FulfilmentID, contract.StatusNotDone, secret, time.Now().Add(-time.Hour)), CannotTell},
		{"AnotherKeysAnswerCannotTell", signed("another-key", contract.StatusNotDone, secret, time.Now()), CannotTell},
		{"ServerErrorCannotTell", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }, CannotTell},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var path string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				path = r.URL.Path
				tt.handler(w, r)
			}))
			defer srv.Close()
			c, err := NewHTTP(HTTPConfig{URL: srv.URL, Secret: secret, LookupURL: srv.URL + "/fulfilments/{key}"})
			require.NoError(t, err)
			got, _, err := c.Lookup(context.Background(), req.FulfilmentID)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			require.Equal(t, "/fulfilments/"+req.FulfilmentID, path)
		})
	}

	t.Run("UnreachableCannotTell", func(t *testing.T) {
		t.Parallel()
		c, err := NewHTTP(HTTPConfig{URL: "http://127.0.0.1:1", Secret: secret, LookupURL: "http://127.0.0.1:1/{key}"})
		require.NoError(t, err)
		got, ev, err := c.Lookup(context.Background(), "k")
		require.NoError(t, err)
		require.Equal(t, CannotTell, got)
		require.NotEmpty(t, ev["lookup_error"])
	})

	t.Run("LookupURLNeedsKey", func(t *testing.T) {
		t.Parallel()
		_, err := NewHTTP(HTTPConfig{URL: "http://127.0.0.1:1", Secret: secret, LookupURL: "http://127.0.0.1:1/status"})
		require.Error(t, err)
	})
}

// TestHTTPOneRequestPerAttempt holds the connector to one request on the
// wire per attempt, whatever the connection does.
func TestHTTPOneRequestPerAttempt(t *testing.T) {
	t.Parallel()

	t.Run("NoHTTP2EvenWhenTheReceiverOffersIt", func(t *testing.T) {
		t.Parallel()
		protos := make(chan int, 1)
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			protos <- r.ProtoMajor
		}))
		srv.EnableHTTP2 = true
		srv.StartTLS()
		defer srv.Close()
		transport := newTransport(DefaultCalls)
		transport.TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		c, err := NewHTTP(HTTPConfig{URL: srv.URL, Secret: secret, Transport: transport})
		require.NoError(t, err)
		require.Equal(t, state.Done, c.Fulfil(context.Background(), req).Outcome)
		require.Equal(t, 1, <-protos, "the connector must speak HTTP/1.1: Go's HTTP/2 client resends on its own")
	})

	t.Run("ConnectionLostAfterTheRequestIsNotResent", func(t *testing.T) {
		t.Parallel()
		// The receiver answers the first request and keeps the connection;
		// it reads the second request in full, then drops the connection
		// without answering. net/http resends a replayable request on a
		// reused connection lost this way; an attempt must not be.
		var calls atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body)
			if calls.Add(1) == 1 {
				w.WriteHeader(http.StatusOK)
				return
			}
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		}))
		defer srv.Close()
		c := newHTTP(t, srv.URL, 5*time.Second)
		require.Equal(t, state.Done, c.Fulfil(context.Background(), req).Outcome)
		second := req
		second.Attempt = 2
		res := c.Fulfil(context.Background(), second)
		require.Equal(t, state.Unknown, res.Outcome, "evidence: %v", res.Evidence)
		require.EqualValues(t, 2, calls.Load(), "the second attempt reached the receiver more than once")
	})
}

// TestHTTPSignsWithOneClockReading pins the clock so that every reading
// crosses a second: the signed timestamp and the header must still agree.
func TestHTTPSignsWithOneClockReading(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	clock := func() time.Time { return time.Unix(1_800_000_000+calls.Add(1), 999_999_999) }
	var verified atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		wh, _ := standardwebhooks.NewWebhook(secret)
		verified.Store(wh.VerifyIgnoringTimestamp(body, r.Header) == nil)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	c, err := NewHTTP(HTTPConfig{URL: srv.URL, Secret: secret, Now: clock})
	require.NoError(t, err)
	require.Equal(t, state.Done, c.Fulfil(context.Background(), req).Outcome)
	require.True(t, verified.Load(), "the signature covers the timestamp that was sent")
}

// TestHTTPKeepsAConnectionPerCall: a process making Calls calls at once,
// more than net/http keeps idle by default (100 in all, two per host),
// opens that many connections once and reuses them for the next calls.
func TestHTTPKeepsAConnectionPerCall(t *testing.T) {
	t.Parallel()
	const calls = 150
	var (
		mu      sync.Mutex
		arrived int
		release = make(chan struct{})
		opened  atomic.Int32
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		// Every call of a round waits for the whole round, so the round
		// needs a connection per call.
		mu.Lock()
		arrived++
		wait := release
		if arrived == calls {
			close(release)
			arrived, release = 0, make(chan struct{})
		}
		mu.Unlock()
		select {
		case <-wait:
			w.WriteHeader(http.StatusOK)
		case <-time.After(5 * time.Second): // a round that never fills fails, not hangs
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c, err := NewHTTP(HTTPConfig{URL: srv.URL, Secret: secret, Timeout: 10 * time.Second, Calls: calls})
	require.NoError(t, err)
	round := func() {
		var wg sync.WaitGroup
		for range calls {
			wg.Go(func() {
				if res := c.Fulfil(context.Background(), req); res.Outcome != state.Done {
					t.Errorf("outcome %s, evidence %v", res.Outcome, res.Evidence)
				}
			})
		}
		wg.Wait()
	}
	round()
	require.EqualValues(t, calls, opened.Load(), "the first round needs a connection per call")
	// A connection goes back to the idle pool just after its answer is
	// read, on the transport's own goroutine; give the last ones that
	// moment, generously for a machine busy with other suites.
	time.Sleep(500 * time.Millisecond)
	round()
	require.EqualValues(t, calls, opened.Load(), "the second round opened connections the first left idle: the transport keeps too few")
}
