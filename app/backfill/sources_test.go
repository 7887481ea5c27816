package backfill_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/backfill"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/db"
)

const (
	paddleKey    = "pdl_sdbx_apikey_01backfilltestkeydonotlog"
	payPalID     = "AYbackfillclientid"
	payPalSecret = "EKbackfillclientsecretdonotlog"
)

// fakePaddle is Paddle's GET /events as far as a backfill uses it: newest
// first (order_by=id[DESC]), per_page, and an absolute meta.pagination.next
// link with an after cursor.
type fakePaddle struct {
	mu      sync.Mutex
	events  []map[string]any // newest first
	perPage int
	tooMany atomic.Int32
	pages   atomic.Int32
	// elsewhere, when set, is where the next link points.
	elsewhere string
	// authorizations seen by a server the next link points to.
	srv *httptest.Server
}

func (f *fakePaddle) add(id, typ string, at time.Time, data map[string]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append([]map[string]any{{"event_id": id, "event_type": typ, "occurred_at": at.UTC().Format(time.RFC3339Nano), "data": data}}, f.events...)
}

func (f *fakePaddle) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/events" || r.Header.Get("Authorization") != "Bearer "+paddleKey {
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"error":{"type":"request_error","code":"forbidden","detail":"no"}}`))
		return
	}
	if r.URL.Query().Get("order_by") != "id[DESC]" {
		http.Error(w, "order_by", http.StatusBadRequest)
		return
	}
	if f.tooMany.Load() > 0 {
		f.tooMany.Add(-1)
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"error":{"type":"request_error","code":"too_many_requests","detail":"slow down"}}`))
		return
	}
	f.pages.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	after := r.URL.Query().Get("after")
	var out []map[string]any
	skipping := after != ""
	for _, e := range f.events {
		if skipping {
			skipping = e["event_id"] != after
			continue
		}
		out = append(out, e)
	}
	more := len(out) > f.perPage
	out = out[:min(len(out), f.perPage)]
	next := ""
	if more {
		base := "http://" + r.Host
		if f.elsewhere != "" {
			base = f.elsewhere
		}
		next = base + "/events?order_by=id%5BDESC%5D&per_page=" + strconv.Itoa(f.perPage) + "&after=" + out[len(out)-1]["event_id"].(string)
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"data": out, "meta": map[string]any{"request_id": "r1", "pagination": map[string]any{"per_page": f.perPage, "next": next, "has_more": more}}})
}

func paddleTxn(id, status string) map[string]any {
	return map[string]any{"id": id, "status": status, "origin": "web", "currency_code": "USD"}
}

func TestPaddleBackfill(t *testing.T) {
	t.Parallel()
	setupPaddle := func(t *testing.T) (*bundle, *fakePaddle, *provider.Paddle) {
		b := setup(t)
		api := &fakePaddle{perPage: 2}
		srv := httptest.NewServer(api)
		t.Cleanup(srv.Close)
		p, err := provider.NewPaddle(provider.PaddleConfig{Secrets: []string{"pdl_ntfset_01backfill_secret"}})
		require.NoError(t, err)
		b.run, err = backfill.NewPaddle(backfill.PaddleConfig{APIKey: paddleKey, APIURL: srv.URL, Provider: p,
			Config: backfill.Config{Service: b.svc, Store: db.New(b.db.Pool), Logger: b.logger, Now: func() time.Time { return b.now }}})
		require.NoError(t, err)
		return b, api, p
	}

	t.Run("PagesThroughWhatWasMissedAndFulfilsEachOnce", func(t *testing.T) {
		t.Parallel()
		b, api, _ := setupPaddle(t)
		for i := range 5 {
			at := b.now.Add(-time.Duration(5-i) * time.Hour)
			api.add(fmt.Sprintf("evt_01bf%02dpaid", i), "transaction.paid", at, paddleTxn(fmt.Sprintf("txn_bf_%d", i), "paid"))
			api.add(fmt.Sprintf("evt_01bf%02ddone", i), "transaction.completed", at.Add(time.Second), paddleTxn(fmt.Sprintf("txn_bf_%d", i), "completed"))
		}
		// Older than the window: never listed as far as this.
		api.mu.Lock()
		api.events = append(api.events, map[string]any{"event_id": "evt_01old", "event_type": "transaction.completed",
			"occurred_at": b.now.Add(-100 * time.Hour).UTC().Format(time.RFC3339), "data": paddleTxn("txn_old", "completed")})
		api.mu.Unlock()
		res, err := b.run.Run(b.ctx, time.Time{})
		require.NoError(t, err)
		require.Equal(t, 5, res.Listed, "the completed transactions of the window")
		require.Equal(t, 5, res.Fulfilments)
		require.GreaterOrEqual(t, api.pages.Load(), int32(5), "two events a page")
		require.Equal(t, 5, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE provider = 'paddle' AND origin = 'backfill'`))
		require.Zero(t, b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE payment_id = 'txn_old'`))
		_, ok, err := db.Checkpoint(b.ctx, b.db.Pool, "paddle")
		require.NoError(t, err)
		require.True(t, ok, "the checkpoint is Paddle's own")

		res, err = b.run.Run(b.ctx, time.Time{})
		require.NoError(t, err)
		require.Zero(t, res.New)
		require.Equal(t, 5, b.db.Count(t, `SELECT count(*) FROM fulfilment`))
		require.NotContains(t, b.logs.String(), paddleKey, "the key is never logged")
	})

	t.Run("AWebhookAndTheBackfillFulfilOnce", func(t *testing.T) {
		t.Parallel()
		b, api, p := setupPaddle(t)
		api.add("evt_01race", "transaction.completed", b.now.Add(-time.Minute), paddleTxn("txn_race", "completed"))
		api.mu.Lock()
		body, err := json.Marshal(api.events[0])
		api.mu.Unlock()
		require.NoError(t, err)
		ev, err := p.Verify(providertest.SignPaddle(body, "pdl_ntfset_01backfill_secret", time.Now()), body, time.Now())
		require.NoError(t, err)
		b.raceWebhook(t, ev)
	})

	t.Run("WaitsOutA429", func(t *testing.T) {
		t.Parallel()
		b, api, _ := setupPaddle(t)
		api.add("evt_01slow", "transaction.completed", b.now.Add(-time.Hour), paddleTxn("txn_slow", "completed"))
		api.tooMany.Store(1)
		res, err := b.run.Run(b.ctx, time.Time{})
		require.NoError(t, err)
		require.Equal(t, 1, res.Fulfilments)
		require.Contains(t, b.logs.String(), "rate-limited")
	})

	t.Run("ALinkOffPaddlesOriginIsNotFollowed", func(t *testing.T) {
		t.Parallel()
		b, api, _ := setupPaddle(t)
		var sawKey atomic.Bool
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sawKey.Store(strings.Contains(r.Header.Get("Authorization"), paddleKey))
		}))
		t.Cleanup(evil.Close)
		api.elsewhere = evil.URL
		for i := range 3 {
			api.add(fmt.Sprintf("evt_01off%d", i), "transaction.completed", b.now.Add(-time.Hour), paddleTxn(fmt.Sprintf("txn_off_%d", i), "completed"))
		}
		_, err := b.run.Run(b.ctx, time.Time{})
		require.ErrorContains(t, err, "not followed")
		require.False(t, sawKey.Load(), "the key never went elsewhere")
		_, ok, _ := db.Checkpoint(b.ctx, b.db.Pool, "paddle")
		require.False(t, ok, "a run that did not finish keeps the checkpoint")
	})
}

// fakePayPal is PayPal's token endpoint and GET
// /v1/notifications/webhooks-events as a backfill uses them.
type fakePayPal struct {
	mu      sync.Mutex
	events  []map[string]any // newest first
	perPage int
	tokens  atomic.Int32
	// revoked counts the tokens revoked: the one handed out and honoured
	// is A21-token-<revoked>.
	revoked atomic.Int32
}

// token is the access token the fake hands out and honours now.
func (f *fakePayPal) token() string { return fmt.Sprintf("A21-token-%d", f.revoked.Load()) }

func (f *fakePayPal) add(id, capture, status string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append([]map[string]any{{"id": id, "event_type": "PAYMENT.CAPTURE.COMPLETED", "create_time": at.UTC().Format(time.RFC3339),
		"resource_type": "capture", "resource": map[string]any{"id": capture, "status": status}}}, f.events...)
}

func (f *fakePayPal) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/oauth2/token":
		id, secret, ok := r.BasicAuth()
		if !ok || id != payPalID || secret != payPalSecret || r.FormValue("grant_type") != "client_credentials" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"invalid_client","error_description":"Client Authentication failed"}`))
			return
		}
		f.tokens.Add(1)
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": f.token(), "token_type": "Bearer", "expires_in": 32400})
	case "/v1/notifications/webhooks-events":
		if r.Header.Get("Authorization") != "Bearer "+f.token() {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		q := r.URL.Query()
		start, err := time.Parse(time.RFC3339, q.Get("start_time"))
		if err != nil || q.Get("event_type") == "" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"name":"VALIDATION_ERROR","message":"Invalid request"}`))
			return
		}
		page, _ := strconv.Atoi(cmpOr(q.Get("page"), "0"))
		f.mu.Lock()
		var in []map[string]any
		for _, e := range f.events {
			at, _ := time.Parse(time.RFC3339, e["create_time"].(string))
			if !at.Before(start) && e["event_type"] == q.Get("event_type") {
				in = append(in, e)
			}
		}
		f.mu.Unlock()
		lo, hi := min(page*f.perPage, len(in)), min((page+1)*f.perPage, len(in))
		links := []map[string]any{}
		if hi < len(in) {
			q.Set("page", strconv.Itoa(page+1))
			links = append(links, map[string]any{"href": "http://" + r.Host + r.URL.Path + "?" + q.Encode(), "rel": "next", "method": "GET"})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"events": in[lo:hi], "count": hi - lo, "links": links})
	default:
		id, ok := strings.CutPrefix(r.URL.Path, "/v1/notifications/webhooks-events/")
		if !ok {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+f.token() {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"invalid_token","error_description":"Token signature verification failed"}`))
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, e := range f.events {
			if e["id"] == id {
				_ = json.NewEncoder(w).Encode(e)
				return
			}
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"name":"INVALID_RESOURCE_ID","message":"The requested resource ID was not found"}`))
	}
}

// TestPayPalAPIShowsAnEvent: PayPal's own copy of an event by its id, with
// one access token for many requests; an id PayPal does not know is its
// own error, and PayPal not answering is ErrUnavailable.
func TestPayPalAPIShowsAnEvent(t *testing.T) {
	t.Parallel()
	fake := &fakePayPal{}
	fake.add("WH-1", "CAP1", "COMPLETED", time.Now())
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	api, err := provider.NewPayPalAPI(payPalID, payPalSecret, srv.URL)
	require.NoError(t, err)
	for range 3 {
		raw, err := api.Event(t.Context(), "WH-1")
		require.NoError(t, err)
		require.Contains(t, string(raw), `"CAP1"`)
	}
	require.EqualValues(t, 1, fake.tokens.Load(), "one token for many requests")
	// PayPal revokes the token (credentials rotated): the request it
	// refuses drops it, and the next one gets a new token, instead of
	// waiting out the old one's 9 hours.
	fake.revoked.Add(1)
	_, err = api.Event(t.Context(), "WH-1")
	require.ErrorIs(t, err, provider.ErrUnavailable)
	raw, err := api.Event(t.Context(), "WH-1")
	require.NoError(t, err)
	require.Contains(t, string(raw), `"CAP1"`)
	require.EqualValues(t, 2, fake.tokens.Load())
	_, err = api.Event(t.Context(), "WH-NOBODY")
	require.Error(t, err)
	require.NotErrorIs(t, err, provider.ErrUnavailable, "an event PayPal does not know is not a PayPal that is down")
	require.ErrorContains(t, err, "404")
	srv.Close()
	_, err = api.Event(t.Context(), "WH-1")
	require.ErrorIs(t, err, provider.ErrUnavailable)
	require.NotContains(t, err.Error(), payPalSecret)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func TestPayPalBackfill(t *testing.T) {
	t.Parallel()
	setupPayPal := func(t *testing.T, secret string) (*bundle, *fakePayPal) {
		b := setup(t)
		api := &fakePayPal{perPage: 2}
		srv := httptest.NewServer(api)
		t.Cleanup(srv.Close)
		p, err := provider.NewPayPal(provider.PayPalConfig{WebhookIDs: []string{"WH1"}, Fetch: func(context.Context, string) ([]byte, error) {
			return nil, provider.ErrUnavailable
		}})
		require.NoError(t, err)
		papi, err := provider.NewPayPalAPI(payPalID, secret, srv.URL)
		require.NoError(t, err)
		b.run, err = backfill.NewPayPal(backfill.PayPalConfig{API: papi, Provider: p,
			Config: backfill.Config{Service: b.svc, Store: db.New(b.db.Pool), Logger: b.logger, Now: func() time.Time { return b.now }}})
		require.NoError(t, err)
		return b, api
	}

	t.Run("FulfilsEachCompletedCaptureOnce", func(t *testing.T) {
		t.Parallel()
		b, api := setupPayPal(t, payPalSecret)
		for i := range 5 {
			api.add(fmt.Sprintf("WH-BF-%d", i), fmt.Sprintf("CAPBF%d", i), "COMPLETED", b.now.Add(-time.Duration(i+1)*time.Hour))
		}
		api.add("WH-BF-DECLINED", "CAPBFX", "DECLINED", b.now.Add(-time.Hour))
		api.mu.Lock() // a dispute of one of them, lost
		api.events = append(api.events, map[string]any{"id": "WH-BF-LOST", "event_type": "CUSTOMER.DISPUTE.RESOLVED", "create_time": b.now.Add(-time.Minute).UTC().Format(time.RFC3339),
			"resource": map[string]any{"disputed_transactions": []any{map[string]any{"seller_transaction_id": "CAPBF0"}}, "dispute_outcome": map[string]any{"outcome_code": "RESOLVED_BUYER_FAVOUR"}}})
		api.mu.Unlock()
		api.add("WH-BF-OLD", "CAPOLD", "COMPLETED", b.now.Add(-100*time.Hour))
		res, err := b.run.Run(b.ctx, time.Time{})
		require.NoError(t, err)
		require.Equal(t, 7, res.Listed)
		require.Equal(t, 5, res.Fulfilments, "the declined one is stored, and fulfils nothing")
		var reverses string
		require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT reverses FROM webhook_event WHERE event_id = 'WH-BF-LOST'`).Scan(&reverses))
		require.Equal(t, "CAPBF0", reverses, "the lost dispute is backfilled too")
		require.Equal(t, 5, b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE provider = 'paypal'`))
		require.Zero(t, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'WH-BF-OLD'`))
		res, err = b.run.Run(b.ctx, time.Time{})
		require.NoError(t, err)
		require.Zero(t, res.New)
		require.Equal(t, int32(1), api.tokens.Load(), "one token, kept until a minute before it expires, serves both runs")
		require.NotContains(t, b.logs.String(), payPalSecret)
		require.NotContains(t, b.logs.String(), "A21-token")
	})

	t.Run("BadCredentialsKeepTheCheckpoint", func(t *testing.T) {
		t.Parallel()
		b, api := setupPayPal(t, "wrong-secret")
		api.add("WH-BF-1", "CAPBF1", "COMPLETED", b.now.Add(-time.Hour))
		_, err := b.run.Run(b.ctx, time.Time{})
		require.ErrorContains(t, err, "paypal answered 401: Client Authentication failed")
		require.NotContains(t, err.Error(), "wrong-secret")
		_, ok, _ := db.Checkpoint(b.ctx, b.db.Pool, "paypal")
		require.False(t, ok)
		require.Zero(t, b.db.Count(t, `SELECT count(*) FROM webhook_event`))
	})
}
