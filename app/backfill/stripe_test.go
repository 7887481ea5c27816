package backfill_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/backfill"
	"github.com/guardian-pay/guardian/app/connector/connectortest"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
	"github.com/guardian-pay/guardian/jobs"
)

const apiKey = "sk_test_backfill_secret_key_do_not_log"

// fakeEvents is Stripe's GET /v1/events as far as a backfill uses it:
// newest first, created[gte], types[], limit and starting_after paging.
type fakeEvents struct {
	mu      sync.Mutex
	events  []map[string]any // newest first
	pages   atomic.Int32
	limit   int
	tooMany atomic.Int32 // answer 429 this many times first
	failAt  atomic.Value // starting_after id whose page answers 500
}

func (f *fakeEvents) add(id, typ string, created time.Time, object map[string]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := map[string]any{"id": id, "object": "event", "type": typ, "created": created.Unix(), "api_version": "2025-03-31.basil",
		"livemode": false, "data": map[string]any{"object": object}}
	f.events = append([]map[string]any{e}, f.events...)
}

func (f *fakeEvents) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/events" || r.Header.Get("Authorization") != "Bearer "+apiKey {
		http.Error(w, `{"error":{"type":"invalid_request_error","message":"no"}}`, http.StatusUnauthorized)
		return
	}
	if f.tooMany.Load() > 0 {
		f.tooMany.Add(-1)
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"error":{"type":"rate_limit_error","message":"too many requests"}}`))
		return
	}
	q := r.URL.Query()
	if at, _ := f.failAt.Load().(string); at != "" && q.Get("starting_after") == at {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"error":{"type":"api_error","message":"try later"}}`))
		return
	}
	f.pages.Add(1)
	gte, _ := strconv.ParseInt(q.Get("created[gte]"), 10, 64)
	types := map[string]bool{}
	for k, v := range q {
		if strings.HasPrefix(k, "types[") {
			types[v[0]] = true
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []map[string]any
	skipping := q.Get("starting_after") != ""
	for _, e := range f.events {
		if skipping {
			skipping = e["id"] != q.Get("starting_after")
			continue
		}
		if e["created"].(int64) >= gte && (len(types) == 0 || types[e["type"].(string)]) {
			out = append(out, e)
		}
	}
	more := len(out) > f.limit
	out = out[:min(len(out), f.limit)]
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "url": "/v1/events", "has_more": more, "data": out})
}

type bundle struct {
	ctx    context.Context
	db     *dbtest.DB
	svc    *fulfilment.Service
	api    *fakeEvents
	run    *backfill.Backfill
	logs   *bytes.Buffer
	logger *slog.Logger
	now    time.Time
}

type nopEnqueuer struct{}

func (nopEnqueuer) EnqueueDispatchTx(context.Context, pgx.Tx, ...string) error  { return nil }
func (nopEnqueuer) EnqueueRouteTx(context.Context, pgx.Tx, ...db.Payment) error { return nil }
func (nopEnqueuer) DispatchJobs() db.DispatchJobs                               { return jobs.DispatchJobs() }

func setup(t *testing.T) *bundle {
	t.Helper()
	d := dbtest.NewDB(t)
	logs := &bytes.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	svc, err := fulfilment.New(fulfilment.Config{Store: db.New(d.Pool), Enqueuer: nopEnqueuer{}, Logger: logger, Connector: &connectortest.Recorder{}})
	require.NoError(t, err)
	stripeProvider, err := provider.NewStripe(provider.StripeConfig{Secrets: []string{"whsec_test"}})
	require.NoError(t, err)
	api := &fakeEvents{limit: 3}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	b := &bundle{ctx: context.Background(), db: d, svc: svc, api: api, logs: logs, logger: logger, now: time.Now()}
	b.run, err = backfill.NewStripe(backfill.StripeConfig{
		APIKey: apiKey, APIURL: srv.URL, Provider: stripeProvider,
		Config: backfill.Config{Service: svc, Store: db.New(d.Pool), Logger: logger, Now: func() time.Time { return b.now }},
	})
	require.NoError(t, err)
	return b
}

// raceWebhook delivers ev as a webhook four times at once while a backfill
// that lists it runs, and checks that it is stored and fulfilled once.
func (b *bundle) raceWebhook(t *testing.T, ev provider.Event) {
	t.Helper()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			_, err := b.svc.Accept(b.ctx, ev)
			require.NoError(t, err)
		})
	}
	wg.Go(func() {
		_, err := b.run.Run(b.ctx, time.Time{})
		require.NoError(t, err)
	})
	wg.Wait()
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM webhook_event`))
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment`))
}

// purchase adds a paid card purchase's session event, created at.
func (b *bundle) purchase(i int, at time.Time) {
	b.api.add(fmt.Sprintf("evt_bf_%d", i), "checkout.session.completed", at, map[string]any{
		"id": fmt.Sprintf("cs_bf_%d", i), "object": "checkout.session", "mode": "payment", "payment_status": "paid",
		"payment_intent": fmt.Sprintf("pi_bf_%d", i)})
}

func TestStripeBackfill(t *testing.T) {
	t.Parallel()

	t.Run("PagesThroughEverythingMissedAndFulfilsEachOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for i := range 8 {
			b.purchase(i, b.now.Add(-time.Duration(i+1)*time.Hour))
		}
		b.api.add("evt_bf_cus", "customer.created", b.now.Add(-time.Hour), map[string]any{"id": "cus_1"}) // not a rule type
		b.api.add("evt_bf_old", "checkout.session.completed", b.now.Add(-100*time.Hour), map[string]any{"id": "cs_old", "payment_status": "paid", "payment_intent": "pi_old"})
		res, err := b.run.Run(b.ctx, time.Time{})
		require.NoError(t, err)
		require.Equal(t, 8, res.Listed, "the rule types of the last 72 hours")
		require.Equal(t, 8, res.Fulfilments)
		require.GreaterOrEqual(t, b.api.pages.Load(), int32(3), "three events a page")
		require.Equal(t, 8, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE origin = 'backfill'`))
		require.Equal(t, 8, b.db.Count(t, `SELECT count(*) FROM fulfilment`))
		require.Equal(t, 8, b.db.Count(t, `SELECT count(*) FROM fulfilment_transition WHERE actor = 'backfill'`))

		// Again: nothing new, nothing fulfilled twice; it starts from the
		// checkpoint less the overlap.
		res, err = b.run.Run(b.ctx, time.Time{})
		require.NoError(t, err)
		require.Zero(t, res.New)
		require.WithinDuration(t, b.now.Add(-backfill.DefaultOverlap), res.From, time.Second)
		require.Equal(t, 8, b.db.Count(t, `SELECT count(*) FROM fulfilment`))
		require.NotContains(t, b.logs.String(), apiKey, "the key is never logged")
	})

	t.Run("WaitsOutA429", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.purchase(1, b.now.Add(-time.Hour))
		b.api.tooMany.Store(1)
		res, err := b.run.Run(b.ctx, time.Time{})
		require.NoError(t, err)
		require.Equal(t, 1, res.Fulfilments)
		require.Contains(t, b.logs.String(), "rate-limited")
	})

	t.Run("AFailedRunKeepsItsCheckpointAndTheNextResumes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for i := range 7 {
			b.purchase(i, b.now.Add(-time.Duration(i+1)*time.Hour))
		}
		b.api.failAt.Store(b.api.events[2]["id"].(string)) // the second page fails: a crash mid-way
		_, err := b.run.Run(b.ctx, time.Time{})
		require.Error(t, err)
		require.NotContains(t, err.Error(), apiKey)
		require.Equal(t, 3, b.db.Count(t, `SELECT count(*) FROM webhook_event`), "the first page is stored")
		_, ok, err := db.Checkpoint(b.ctx, b.db.Pool, "stripe")
		require.NoError(t, err)
		require.False(t, ok, "the checkpoint does not move past what is not stored")

		b.api.failAt.Store("")
		res, err := b.run.Run(b.ctx, time.Time{})
		require.NoError(t, err)
		require.Equal(t, 4, res.New, "the rest, from the same window")
		require.Equal(t, 7, b.db.Count(t, `SELECT count(*) FROM fulfilment`), "each purchase once")
	})

	t.Run("ARaceWithTheLiveWebhookFulfilsOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.purchase(1, b.now.Add(-time.Minute))
		body, err := json.Marshal(b.api.events[0])
		require.NoError(t, err)
		stripeProvider, err := provider.NewStripe(provider.StripeConfig{Secrets: []string{"whsec_test"}})
		require.NoError(t, err)
		ev, err := stripeProvider.Verify(providertest.SignStripe(body, "whsec_test", time.Now()), body, time.Now())
		require.NoError(t, err)
		b.raceWebhook(t, ev)
	})

	t.Run("SinceOverridesTheCheckpoint", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.purchase(1, b.now.Add(-2*time.Hour))
		b.purchase(2, b.now.Add(-10*time.Hour))
		res, err := b.run.Run(b.ctx, b.now.Add(-3*time.Hour))
		require.NoError(t, err)
		require.Equal(t, 1, res.Listed)
	})
}
