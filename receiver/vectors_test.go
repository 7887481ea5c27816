package receiver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/receiver"
	"github.com/guardian-pay/guardian/receiver/contract"
)

// Vectors is the one set of test vectors every receiver kit is held to
// (receiver/vectors.json): the Go kit here, the TypeScript and Python kits
// in their own tests, so the three cannot drift. Each is made from the
// contract package, which Guardian's connector signs with.
type Vectors struct {
	About string `json:"about"`
	// Signatures are requests as Guardian signs them: Standard Webhooks,
	// msg_id the key, the signature over "msg_id.timestamp.body".
	Signatures []SignatureVector `json:"signatures"`
	// Verify are requests a receiver must accept or refuse at now, with
	// its secrets (several while rotating).
	Verify []VerifyVector `json:"verify"`
	// Statements are a receiver's signed answers: the exact JSON body and
	// its headers (msg_id the key and ".answer").
	Statements []StatementVector `json:"statements"`
	// Bodies are request bodies a receiver must take or refuse (400)
	// before it looks anything up.
	Bodies []BodyVector `json:"bodies"`
	// Schema is the table every kit keeps its keys in.
	Schema string `json:"schema"`
}

type SignatureVector struct {
	Name      string `json:"name"`
	Secret    string `json:"secret"`
	MsgID     string `json:"msg_id"`
	Timestamp int64  `json:"timestamp"`
	Body      string `json:"body"`
	Signature string `json:"signature"`
}

type VerifyVector struct {
	Name    string            `json:"name"`
	Secrets []string          `json:"secrets"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	Now     int64             `json:"now"`
	Valid   bool              `json:"valid"`
}

type StatementVector struct {
	Name      string             `json:"name"`
	Secret    string             `json:"secret"`
	Statement contract.Statement `json:"statement"`
	Timestamp int64              `json:"timestamp"`
	Body      string             `json:"body"`
	Headers   map[string]string  `json:"headers"`
}

type BodyVector struct {
	Name           string `json:"name"`
	IdempotencyKey string `json:"idempotency_key_header"`
	Body           string `json:"body"`
	// Valid: taken (a test delivery or not, as Test says); else refused
	// with 400.
	Valid bool `json:"valid"`
	Test  bool `json:"test"`
}

const (
	vecSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vecNewSecret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
	vecNow       = 1764576000 // 2025-12-01T08:00:00Z
)

// makeVectors builds the vectors from the contract package.
func makeVectors(t *testing.T) Vectors {
	t.Helper()
	body := func(b contract.Body) string {
		raw, err := json.Marshal(b)
		require.NoError(t, err)
		return string(raw)
	}
	fulfil := body(contract.Body{IdempotencyKey: "gk1_4f3c2a1b0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b", Provider: "stripe", PaymentID: "cs_test_a1",
		EventID: "evt_1", EventType: "checkout.session.completed", Payload: json.RawMessage(`{"id":"evt_1","type":"checkout.session.completed"}`)})
	revoke := body(contract.Body{IdempotencyKey: "gk1_9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b", Provider: "paddle", PaymentID: "txn_01",
		EventID: "evt_01", EventType: "adjustment.updated", Action: contract.ActionRevoke, ActionName: "licence",
		Purchase: json.RawMessage(`{"provider":"paddle","id":"txn_01","kind":"one_time","amount":900,"currency":"EUR"}`),
		Payload:  json.RawMessage(`{"event_id":"evt_01","event_type":"adjustment.updated"}`)})
	test := body(contract.Body{IdempotencyKey: contract.TestKeyPrefix + "0123456789abcdef", Provider: "stripe", PaymentID: contract.TestPaymentID,
		EventID: "gtest_event", EventType: contract.TestEventType, Payload: json.RawMessage(`{"hold_ms":0}`)})
	sign := func(secret, msgID, b string, ts int64) string {
		signer, err := contract.NewSigner(secret)
		require.NoError(t, err)
		h, err := contract.SignHeaders(signer, msgID, []byte(b), time.Unix(ts, 0))
		require.NoError(t, err)
		return h.Get("webhook-signature")
	}
	v := Vectors{About: "Test vectors every receiver kit is held to: made by the Go contract package (receiver/vectors_test.go; " +
		"UPDATE_VECTORS=1 go test ./receiver writes them), read by the Go, TypeScript and Python kits' tests. Times are Unix seconds; " +
		"a receiver accepts a timestamp within 300 s of now, either way."}
	for _, s := range []struct {
		name, secret, msgID, body string
		ts                        int64
	}{
		{"a fulfilment", vecSecret, "gk1_4f3c2a1b0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b", fulfil, vecNow},
		{"a revocation of one action, with its purchase", vecSecret, "gk1_9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b", revoke, vecNow},
		{"a test delivery", vecNewSecret, contract.TestKeyPrefix + "0123456789abcdef", test, vecNow + 1},
		{"a lookup: no body", vecSecret, "gk1_4f3c2a1b0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b", "", vecNow},
	} {
		v.Signatures = append(v.Signatures, SignatureVector{Name: s.name, Secret: s.secret, MsgID: s.msgID, Timestamp: s.ts, Body: s.body,
			Signature: sign(s.secret, s.msgID, s.body, s.ts)})
	}
	headers := func(secret, msgID, b string, ts int64) map[string]string {
		return map[string]string{"webhook-id": msgID, "webhook-timestamp": itoa(ts), "webhook-signature": sign(secret, msgID, b, ts)}
	}
	key := "gk1_4f3c2a1b0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b"
	good := headers(vecSecret, key, fulfil, vecNow)
	both := headers(vecSecret, key, fulfil, vecNow)
	both["webhook-signature"] = sign(vecNewSecret, key, fulfil, vecNow) + " " + both["webhook-signature"] // rotating: one per secret
	with := func(h map[string]string, k, val string) map[string]string {
		out := map[string]string{}
		for a, b := range h {
			out[a] = b
		}
		out[k] = val
		return out
	}
	for _, c := range []VerifyVector{
		{"signed with the secret", []string{vecSecret}, good, fulfil, vecNow, true},
		{"signed with the old of two secrets (rotation)", []string{vecNewSecret, vecSecret}, good, fulfil, vecNow, true},
		{"two signatures, one per secret; the receiver knows one", []string{vecNewSecret}, both, fulfil, vecNow, true},
		{"signed with another secret", []string{vecNewSecret}, good, fulfil, vecNow, false},
		{"a body changed after signing", []string{vecSecret}, good, fulfil + " ", vecNow, false},
		{"a timestamp 300 s old", []string{vecSecret}, good, fulfil, vecNow + 300, true},
		{"a timestamp 301 s old (a replay)", []string{vecSecret}, good, fulfil, vecNow + 301, false},
		{"a timestamp 301 s ahead", []string{vecSecret}, good, fulfil, vecNow - 301, false},
		{"the timestamp header changed", []string{vecSecret}, with(good, "webhook-timestamp", itoa(vecNow+1)), fulfil, vecNow, false},
		{"the id header changed", []string{vecSecret}, with(good, "webhook-id", "gk1_other"), fulfil, vecNow, false},
		{"no signature header", []string{vecSecret}, with(good, "webhook-signature", ""), fulfil, vecNow, false},
		{"a timestamp that is not ASCII decimal digits", []string{vecSecret}, with(good, "webhook-timestamp", itoa(vecNow)+"²"), fulfil, vecNow, false},
		{"a signature of another version", []string{vecSecret}, with(good, "webhook-signature", "v2,"+good["webhook-signature"][3:]), fulfil, vecNow, false},
		{"a lookup, signed over no body", []string{vecSecret}, headers(vecSecret, key, "", vecNow), "", vecNow, true},
	} {
		v.Verify = append(v.Verify, c)
	}
	for _, s := range []struct {
		name string
		st   contract.Statement
		ts   int64
	}{
		{"done", contract.Statement{IdempotencyKey: key, Status: contract.StatusDone, Receipt: "rcpt_5f1e0c2b9a8d7e6f5a4b3c2d"}, vecNow},
		{"in progress", contract.Statement{IdempotencyKey: key, Status: contract.StatusInProgress}, vecNow},
		{"declined", contract.Statement{IdempotencyKey: key, Status: contract.StatusDeclined, Reason: "no such course"}, vecNow},
		{"mismatch", contract.Statement{IdempotencyKey: key, Status: contract.StatusMismatch}, vecNow},
		{"not done", contract.Statement{IdempotencyKey: key, Status: contract.StatusNotDone}, vecNow},
	} {
		raw, h, err := contract.SignStatement(vecSecret, s.st, time.Unix(s.ts, 0))
		require.NoError(t, err)
		v.Statements = append(v.Statements, StatementVector{Name: s.name, Secret: vecSecret, Statement: s.st, Timestamp: s.ts, Body: string(raw),
			Headers: map[string]string{"webhook-id": h.Get("webhook-id"), "webhook-timestamp": h.Get("webhook-timestamp"), "webhook-signature": h.Get("webhook-signature")}})
	}
	testAsReal := body(contract.Body{IdempotencyKey: key, Provider: "stripe", PaymentID: contract.TestPaymentID, EventID: "gtest_event",
		EventType: contract.TestEventType, Payload: json.RawMessage(`{}`)})
	realAsTest := body(contract.Body{IdempotencyKey: contract.TestKeyPrefix + "1", Provider: "stripe", PaymentID: "cs_1", EventID: "evt_1",
		EventType: "checkout.session.completed", Payload: json.RawMessage(`{}`)})
	v.Bodies = []BodyVector{
		{"a fulfilment", key, fulfil, true, false},
		{"a revocation", "gk1_9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b", revoke, true, false},
		{"a test delivery", contract.TestKeyPrefix + "0123456789abcdef", test, true, true},
		{"the Idempotency-Key header names another key", "gk1_other", fulfil, false, false},
		{"no Idempotency-Key header", "", fulfil, false, false},
		{"a field the contract does not have", key, fulfil[:len(fulfil)-1] + `,"extra":1}`, false, false},
		{"not JSON", key, "idempotency_key=" + key, false, false},
		{"a test event under a key that is not a test key", key, testAsReal, false, false},
		{"a test key on an event that is not a test", contract.TestKeyPrefix + "1", realAsTest, false, false},
	}
	v.Schema = receiver.Schema
	return v
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestVectors holds receiver/vectors.json to what the contract package
// makes, and the Go kit to it (UPDATE_VECTORS=1 rewrites the file).
func TestVectors(t *testing.T) {
	t.Parallel()
	want := makeVectors(t)
	raw, err := json.MarshalIndent(want, "", "  ")
	require.NoError(t, err)
	raw = append(raw, '\n')
	if os.Getenv("UPDATE_VECTORS") == "1" {
		require.NoError(t, os.WriteFile("vectors.json", raw, 0o644))
	}
	got, err := os.ReadFile("vectors.json")
	require.NoError(t, err)
	require.Equal(t, string(raw), string(got), "receiver/vectors.json is stale: UPDATE_VECTORS=1 go test ./receiver")

	// The Go kit against them: what it accepts and refuses, at the
	// vectors' clock.
	b := setup(t, func(int32) error { return nil })
	var now atomic.Int64
	var acted atomic.Int32
	r, err := receiver.New(receiver.Config{Pool: b.d.Pool, Secrets: []string{vecSecret}, Now: func() time.Time { return time.Unix(now.Load(), 0) },
		Handler: func(context.Context, pgx.Tx, receiver.Delivery) error { acted.Add(1); return nil }})
	require.NoError(t, err)
	serve := func(secrets []string, method string, headers map[string]string, body string) int {
		kit := r
		if len(secrets) != 1 || secrets[0] != vecSecret {
			kit, err = receiver.New(receiver.Config{Pool: b.d.Pool, Secrets: secrets, Now: func() time.Time { return time.Unix(now.Load(), 0) },
				Handler: func(context.Context, pgx.Tx, receiver.Delivery) error { acted.Add(1); return nil }})
			require.NoError(t, err)
		}
		req := httptest.NewRequest(method, "/lookup/"+headers["webhook-id"], strings.NewReader(body))
		for k, v := range headers {
			if v != "" {
				req.Header.Set(k, v)
			}
		}
		req.Header.Set("Idempotency-Key", headers["webhook-id"])
		w := httptest.NewRecorder()
		if method == http.MethodGet {
			kit.Lookup().ServeHTTP(w, req)
		} else {
			kit.Action().ServeHTTP(w, req)
		}
		return w.Code
	}
	for _, c := range want.Verify {
		now.Store(c.Now)
		method := http.MethodPost
		if c.Body == "" {
			method = http.MethodGet
		}
		code := serve(c.Secrets, method, c.Headers, c.Body)
		require.Equal(t, c.Valid, code != http.StatusUnauthorized, "%s: answered %d", c.Name, code)
	}
	_, err = b.d.Pool.Exec(t.Context(), `DELETE FROM guardian_receiver_key`) // the verify cases' keys
	require.NoError(t, err)
	for _, c := range want.Bodies {
		signer, err := contract.NewSigner(vecSecret)
		require.NoError(t, err)
		h, err := contract.SignHeaders(signer, "msg_"+c.Name, []byte(c.Body), time.Unix(vecNow, 0))
		require.NoError(t, err)
		now.Store(vecNow)
		before := acted.Load()
		req := httptest.NewRequest(http.MethodPost, "/act", strings.NewReader(c.Body))
		req.Header = h
		if c.IdempotencyKey != "" {
			req.Header.Set("Idempotency-Key", c.IdempotencyKey)
		}
		w := httptest.NewRecorder()
		r.Action().ServeHTTP(w, req)
		if !c.Valid {
			require.Equal(t, http.StatusBadRequest, w.Code, c.Name)
			continue
		}
		require.Equal(t, http.StatusOK, w.Code, "%s: %s", c.Name, w.Body)
		require.Equal(t, !c.Test, acted.Load() == before+1, "%s: a test delivery never reaches the handler", c.Name)
	}
}
