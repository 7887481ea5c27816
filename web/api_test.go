package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/web"
)

// unknownFirst answers "unknown" to a payment's first call and "done" after:
// a connector that timed out once.
func unknownFirst() func(context.Context, connector.Request) connector.Result {
	return firstPerPayment(connector.Result{Outcome: state.Unknown, Evidence: map[string]any{"error": "timeout"}})
}

// firstPerPayment answers each payment's first call with first, and every
// later call, under any key, done.
func firstPerPayment(first connector.Result) func(context.Context, connector.Request) connector.Result {
	var mu sync.Mutex
	seen := map[string]bool{}
	return func(_ context.Context, r connector.Request) connector.Result {
		mu.Lock()
		defer mu.Unlock()
		if !seen[r.PaymentID] {
			seen[r.PaymentID] = true
			return first
		}
		return connector.Result{Outcome: state.Done}
	}
}

func (b *testBundle) api(t *testing.T, method, path, token string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, b.srv.URL+path, r)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, raw
}

// parked delivers a payment whose first call ends unknown and waits until
// it is parked; it returns the fulfilment id.
func (b *testBundle) parked(t *testing.T, eventID, paymentID string) string {
	t.Helper()
	return b.reach(t, eventID, paymentID, state.NeedsReconciliation)
}

// reach delivers a payment and waits until its one fulfilment is in st; it
// returns the fulfilment id.
func (b *testBundle) reach(t *testing.T, eventID, paymentID string, st state.State) string {
	t.Helper()
	require.Equal(t, http.StatusOK, b.postStripe(t, intentEvent(eventID, paymentID)).code)
	var id string
	require.Eventually(t, func() bool {
		fs, err := db.FulfilmentsByPayment(b.ctx, b.db.Pool, "stripe", paymentID)
		require.NoError(t, err)
		if len(fs) == 1 && fs[0].State == st {
			id = fs[0].ID
			return true
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
	return id
}

func TestAPIAuth(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	routes := []struct{ method, path string }{
		{"GET", "/api/v1/fulfilments"},
		{"GET", "/api/v1/fulfilments/0b6f3c38-8a7e-4a57-9d0e-2d1f4f6a4b11"},
		{"POST", "/api/v1/fulfilments/0b6f3c38-8a7e-4a57-9d0e-2d1f4f6a4b11/resolve"},
		{"GET", "/api/v1/events/stripe/evt_1"},
		{"POST", "/api/v1/events/stripe/evt_1/replay"},
		{"GET", "/api/v1/stats"},
		{"GET", "/riverui/"},
		{"GET", "/riverui/api/jobs"},
	}
	for i, r := range routes {
		// A wrong token on every other route: eight failures, under the
		// sign-in throttle's ten (TestThrottle tests the eleventh).
		for _, token := range []string{"", []string{"wrong-token", adminToken + "x"}[i%2]} {
			code, body := b.api(t, r.method, r.path, token, nil)
			require.Equal(t, http.StatusUnauthorized, code, "%s %s with %q", r.method, r.path, token)
			if strings.HasPrefix(r.path, "/api/") {
				want := "operator token refused" // a token was given: it is not required, it is wrong
				if token == "" {
					want = "operator token required"
				}
				require.Contains(t, string(body), want, "%s %s with %q", r.method, r.path, token)
			}
		}
	}
	code, _ := b.api(t, "GET", "/api/v1/stats", "old-operator-token", nil)
	require.Equal(t, http.StatusOK, code, "a rotated-in token works")
	code, _ = b.api(t, "GET", "/riverui/", adminToken, nil)
	require.Equal(t, http.StatusOK, code, "River UI is served behind the token")
}

func TestResolve(t *testing.T) {
	t.Parallel()

	t.Run("ToFulfilledWithEvidence", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{answer: unknownFirst()})
		id := b.parked(t, "evt_1", "pi_1")
		code, body := b.api(t, "POST", "/api/v1/fulfilments/"+id+"/resolve", b.token, web.ResolveRequest{Attempt: 1, Resolution: "fulfilled", Reason: "customer confirmed delivery", Evidence: "ticket 4711"})
		require.Equal(t, http.StatusOK, code, string(body))
		require.Equal(t, state.Fulfilled, b.db.Fulfilment(t, id).State)
		require.Equal(t, 1, b.rec.CallsFor(id), "resolving by hand calls nothing")

		code, body = b.api(t, "GET", "/api/v1/fulfilments/"+id, b.token, nil)
		require.Equal(t, http.StatusOK, code)
		var d web.FulfilmentDetail
		require.NoError(t, json.Unmarshal(body, &d))
		last := d.Transitions[len(d.Transitions)-1]
		require.Equal(t, "operator ana", last.Actor)
		require.Equal(t, "customer confirmed delivery", last.Reason)
		require.JSONEq(t, `{"resolution":"fulfilled","evidence":"ticket 4711"}`, string(last.Evidence))
		require.Equal(t, "evt_1", d.Event.EventID)
	})

	t.Run("ToPendingRedispatchesWithSameKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{answer: unknownFirst()})
		id := b.parked(t, "evt_1", "pi_1")
		req := web.ResolveRequest{Attempt: 1, Resolution: "pending", Reason: "receiver has no record", Evidence: "receiver log search for the key: nothing"}
		code, body := b.api(t, "POST", "/api/v1/fulfilments/"+id+"/resolve", b.token, req)
		require.Equal(t, http.StatusConflict, code, "refused while the parked call could still be in flight: %s", body)
		require.Contains(t, string(body), "in flight")
		b.db.Backdate(t, id, time.Now().Add(-time.Hour))
		req.Attempt = 2
		code, body = b.api(t, "POST", "/api/v1/fulfilments/"+id+"/resolve", b.token, req)
		require.Equal(t, http.StatusConflict, code, "a decision about another attempt: %s", body)
		var conflict web.ResolveConflict
		require.NoError(t, json.Unmarshal(body, &conflict))
		require.Equal(t, web.ResolveConflict{Error: conflict.Error, State: "needs_reconciliation", Attempt: 1}, conflict)
		req.Attempt = 1
		code, body = b.api(t, "POST", "/api/v1/fulfilments/"+id+"/resolve", b.token, req)
		require.Equal(t, http.StatusOK, code, string(body))
		require.Equal(t, 1, b.waitFulfilled(t, "pi_1"))
		calls := b.rec.Calls()
		require.Len(t, calls, 2)
		require.Equal(t, id, calls[1].FulfilmentID, "same Idempotency-Key")
		require.Equal(t, 2, calls[1].Attempt)
		require.Eventually(t, func() bool {
			return b.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'guardian_dispatch' AND state = 'completed'`) == 2
		}, 10*time.Second, 10*time.Millisecond, "a new dispatch job ran")
	})

	t.Run("ToCancelled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{answer: unknownFirst()})
		id := b.parked(t, "evt_1", "pi_1")
		code, _ := b.api(t, "POST", "/api/v1/fulfilments/"+id+"/resolve", b.token, web.ResolveRequest{Attempt: 1, Resolution: "cancelled", Reason: "refunded instead"})
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, state.Cancelled, b.db.Fulfilment(t, id).State)
	})

	t.Run("RefusedInputChangesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{answer: unknownFirst()})
		id := b.parked(t, "evt_1", "pi_1")
		for _, req := range []any{
			web.ResolveRequest{Attempt: 1, Resolution: "fulfilled", Reason: "looks done"},
			web.ResolveRequest{Attempt: 1, Resolution: "pending", Reason: "retry please"},
			web.ResolveRequest{Attempt: 1, Resolution: "failed", Reason: "r", Evidence: "e"},
			// The audit actor is the credential's: a typed name is refused.
			map[string]any{"resolution": "cancelled", "attempt": 1, "operator": "mallory", "reason": "r"},
			web.ResolveRequest{Attempt: 1, Resolution: "cancelled"},
			web.ResolveRequest{Resolution: "cancelled", Reason: "no attempt named"},
			map[string]string{"resolution": "cancelled", "operator": "ana", "reason": "r", "surprise": "x"},
		} {
			code, body := b.api(t, "POST", "/api/v1/fulfilments/"+id+"/resolve", b.token, req)
			require.Equal(t, http.StatusBadRequest, code, "%+v: %s", req, body)
		}
		require.Equal(t, state.NeedsReconciliation, b.db.Fulfilment(t, id).State)
		code, _ := b.api(t, "POST", "/api/v1/fulfilments/0b6f3c38-8a7e-4a57-9d0e-2d1f4f6a4b11/resolve", b.token, web.ResolveRequest{Attempt: 1, Resolution: "cancelled", Reason: "r"})
		require.Equal(t, http.StatusNotFound, code)
		code, _ = b.api(t, "POST", "/api/v1/fulfilments/not-a-uuid/resolve", b.token, web.ResolveRequest{Attempt: 1, Resolution: "cancelled", Reason: "r"})
		require.Equal(t, http.StatusNotFound, code)
	})

	t.Run("TwoOperatorsAtOnceOneWins", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{answer: unknownFirst()})
		id := b.parked(t, "evt_1", "pi_1")
		reqs := []web.ResolveRequest{
			{Attempt: 1, Resolution: "fulfilled", Reason: "confirmed", Evidence: "ticket 1"},
			{Attempt: 1, Resolution: "cancelled", Reason: "refund"},
		}
		codes := make([]int, len(reqs))
		bodies := make([][]byte, len(reqs))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range reqs {
			wg.Go(func() {
				<-start
				codes[i], bodies[i] = b.api(t, "POST", "/api/v1/fulfilments/"+id+"/resolve", b.token, reqs[i])
			})
		}
		close(start)
		wg.Wait()
		require.ElementsMatch(t, []int{http.StatusOK, http.StatusConflict}, codes)
		final := string(b.db.Fulfilment(t, id).State)
		for i, c := range codes {
			if c == http.StatusConflict {
				var conflict web.ResolveConflict
				require.NoError(t, json.Unmarshal(bodies[i], &conflict))
				require.Equal(t, final, conflict.State, "the 409 says where the row stands")
			} else {
				require.Equal(t, reqs[i].Resolution, final)
			}
		}
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment_transition WHERE fulfilment_id = $1 AND actor LIKE 'operator %'`, id))
	})
}

func TestReplay(t *testing.T) {
	t.Parallel()

	t.Run("FulfilledEventIsNotFulfilledAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		require.Equal(t, http.StatusOK, b.postStripe(t, intentEvent("evt_1", "pi_1")).code)
		require.Equal(t, 1, b.waitFulfilled(t, "pi_1"))
		code, body := b.api(t, "POST", "/api/v1/events/stripe/evt_1/replay", b.token, web.ReplayRequest{})
		require.Equal(t, http.StatusOK, code)
		require.JSONEq(t, `{"result":"already_fulfilled_or_in_flight"}`, string(body))
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment`))
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'guardian_dispatch'`))
		require.Equal(t, 1, b.rec.CallsForPayment("pi_1"), "no second connector call")
	})

	t.Run("CancelledPaymentIsNotSentAgainButCanBeReopened", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{answer: unknownFirst()})
		id := b.parked(t, "evt_1", "pi_1")
		code, _ := b.api(t, "POST", "/api/v1/fulfilments/"+id+"/resolve", b.token, web.ResolveRequest{Attempt: 1, Resolution: "cancelled", Reason: "wrong recipient"})
		require.Equal(t, http.StatusOK, code)
		code, body := b.api(t, "POST", "/api/v1/events/stripe/evt_1/replay", b.token, web.ReplayRequest{})
		require.Equal(t, http.StatusOK, code)
		require.JSONEq(t, `{"result":"already_fulfilled_or_in_flight"}`, string(body), "the parked call may have acted: no new key")
		require.Equal(t, http.StatusOK, b.postStripe(t, `{"id":"evt_2","type":"checkout.session.completed","data":{"object":{"id":"cs_1","object":"checkout.session","payment_intent":"pi_1","payment_status":"paid"}}}`).code)
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment`))

		code, body = b.api(t, "POST", "/api/v1/fulfilments/"+id+"/reopen", b.token, web.ReopenRequest{Attempt: 1, Reason: "recipient was right"})
		require.Equal(t, http.StatusBadRequest, code, "evidence required: %s", body)
		code, body = b.api(t, "POST", "/api/v1/fulfilments/"+id+"/reopen", b.token, web.ReopenRequest{Attempt: 1, Reason: "recipient was right", Evidence: "support ticket 12"})
		require.Equal(t, http.StatusOK, code, string(body))
		var a web.ResolveAnswer
		require.NoError(t, json.Unmarshal(body, &a))
		require.Equal(t, web.Fulfilment{ID: id, Provider: "stripe", PaymentID: "pi_1", State: state.NeedsReconciliation, Attempt: 1},
			web.Fulfilment{ID: a.Fulfilment.ID, Provider: a.Fulfilment.Provider, PaymentID: a.Fulfilment.PaymentID, State: a.Fulfilment.State, Attempt: a.Fulfilment.Attempt},
			"the same row and key, parked again")
		require.Equal(t, 1, b.rec.CallsForPayment("pi_1"), "reopening sends nothing")
	})

	t.Run("UnknownEventAndNonFulfillingType", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		code, _ := b.api(t, "POST", "/api/v1/events/stripe/evt_none/replay", b.token, web.ReplayRequest{})
		require.Equal(t, http.StatusNotFound, code)
		require.Equal(t, http.StatusOK, b.postStripe(t, `{"id":"evt_cus","type":"customer.created","data":{"object":{"id":"cus_1"}}}`).code)
		code, body := b.api(t, "POST", "/api/v1/events/stripe/evt_cus/replay", b.token, web.ReplayRequest{})
		require.Equal(t, http.StatusOK, code)
		require.JSONEq(t, `{"result":"not_fulfilling"}`, string(body))
		code, _ = b.api(t, "POST", "/api/v1/events/stripe/evt_cus/replay", b.token, map[string]string{"operator": "mallory"})
		require.Equal(t, http.StatusBadRequest, code, "the audit actor is the credential's, never a typed name")
	})
}

func TestReadEndpoints(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	for i := range 5 {
		require.Equal(t, http.StatusOK, b.postStripe(t, intentEvent(fmt.Sprintf("evt_%d", i), fmt.Sprintf("pi_%d", i))).code)
		b.waitFulfilled(t, fmt.Sprintf("pi_%d", i))
	}

	// Paging: 2 + 2 + 1, every row once.
	seen := map[string]bool{}
	cursor := ""
	pages := 0
	for {
		code, body := b.api(t, "GET", "/api/v1/fulfilments?state=fulfilled&limit=2&cursor="+cursor, b.token, nil)
		require.Equal(t, http.StatusOK, code, string(body))
		var page web.FulfilmentList
		require.NoError(t, json.Unmarshal(body, &page))
		pages++
		for _, f := range page.Fulfilments {
			require.False(t, seen[f.ID])
			seen[f.ID] = true
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	require.Len(t, seen, 5)
	require.Equal(t, 3, pages)

	code, body := b.api(t, "GET", "/api/v1/fulfilments?payment_id=pi_3", b.token, nil)
	require.Equal(t, http.StatusOK, code)
	var one web.FulfilmentList
	require.NoError(t, json.Unmarshal(body, &one))
	require.Len(t, one.Fulfilments, 1)
	require.Equal(t, "pi_3", one.Fulfilments[0].PaymentID)

	code, body = b.api(t, "GET", "/api/v1/fulfilments?event_id=evt_2&since="+time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), b.token, nil)
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal(body, &one))
	require.Len(t, one.Fulfilments, 1)

	for _, bad := range []string{"state=done", "limit=0", "since=yesterday", "cursor=zzz"} {
		code, _ := b.api(t, "GET", "/api/v1/fulfilments?"+bad, b.token, nil)
		require.Equal(t, http.StatusBadRequest, code, bad)
	}

	code, body = b.api(t, "GET", "/api/v1/events/stripe/evt_1", b.token, nil)
	require.Equal(t, http.StatusOK, code)
	var ev web.EventDetail
	require.NoError(t, json.Unmarshal(body, &ev))
	require.Equal(t, 1, ev.Event.Deliveries)
	require.Len(t, ev.Fulfilments, 1)
	require.JSONEq(t, intentEvent("evt_1", "pi_1"), string(ev.Event.Payload))

	code, body = b.api(t, "GET", "/api/v1/stats", b.token, nil)
	require.Equal(t, http.StatusOK, code)
	var st web.StatsAnswer
	require.NoError(t, json.Unmarshal(body, &st))
	require.Equal(t, 5, st.ByState["fulfilled"])
	require.Equal(t, 0, st.ByState["needs_reconciliation"])
	require.Nil(t, st.OldestNeedsReconciliationAge)
}

// TestIDsInUpperCase: a fulfilment id copied in upper case (a receiver's
// log, a spreadsheet) finds its row everywhere an operator names one.
func TestIDsInUpperCase(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{answer: unknownFirst()})
	id := b.parked(t, "evt_up", "pi_up")
	up := strings.ToUpper(id)
	code, body := b.api(t, "GET", "/api/v1/fulfilments/"+up, b.token, nil)
	require.Equal(t, http.StatusOK, code, string(body))
	code, body = b.api(t, "POST", "/api/v1/fulfilments/recheck", b.token, web.BulkRequest{IDs: []string{up}})
	require.Equal(t, http.StatusConflict, code, "no lookup here; the id itself was found: %s", body)
	code, body = b.api(t, "POST", "/api/v1/fulfilments/"+up+"/resolve", b.token,
		web.ResolveRequest{Attempt: 1, Resolution: "fulfilled", Reason: "receiver has it", Evidence: "order 1"})
	require.Equal(t, http.StatusOK, code, "not 409 moved: %s", body)
	require.Equal(t, state.Fulfilled, b.db.Fulfilment(t, id).State)

	failed := b.reach(t, "evt_up_2", "pi_up_2", state.NeedsReconciliation)
	tx, err := b.db.Pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `SET LOCAL session_replication_role = replica`) // past the guard: declined, as far as this test goes
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `UPDATE fulfilment_move SET state = 'failed' WHERE id = $1`, failed)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `UPDATE fulfilment_identity SET failed = true WHERE id = $1`, failed)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))
	code, body = b.api(t, "POST", "/api/v1/fulfilments/retry", b.token, web.BulkRequest{IDs: []string{strings.ToUpper(failed)}})
	require.Equal(t, http.StatusOK, code, string(body))
	var answer web.BulkAnswer
	require.NoError(t, json.Unmarshal(body, &answer))
	require.Equal(t, "retried", answer.Results[0].Result, "not not_found")
}
