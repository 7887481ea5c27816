package web_test

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"riverqueue.com/riverui"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/connector/connectortest"
	"github.com/guardian-pay/guardian/app/filter"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/logtest"
	"github.com/guardian-pay/guardian/app/operators"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/app/tokens"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
	"github.com/guardian-pay/guardian/db/dbtest/faultproxy"
	"github.com/guardian-pay/guardian/db/dbtest/redistest"
	"github.com/guardian-pay/guardian/jobs"
	"github.com/guardian-pay/guardian/jobs/jobstest"
	"github.com/guardian-pay/guardian/web"
)

const (
	// adminToken is an environment token (GUARDIAN_ADMIN_TOKEN).
	adminToken = "operator-token-for-tests"
	// The providers' secrets are their providertest samples'.
	stripeSecret     = providertest.StripeSecret
	standardSecret   = providertest.StandardSecret
	paddleSecret     = providertest.PaddleSecret
	shopifySecret    = providertest.ShopifySecret
	shopifyOldSecret = providertest.ShopifyOldSecret
	lemonSecret      = providertest.LemonSqueezySecret
	adyenKey         = providertest.AdyenKey
	payPalWebhook    = providertest.PayPalWebhook
	payPalCertURL    = providertest.PayPalCertURL
)

// payPalKey is the key of the PayPal sample's certificate.
func payPalKey() *rsa.PrivateKey {
	key, _ := providertest.PayPalTestCertificate()
	return key
}

type filterMode int

const (
	noFilter filterMode = iota
	redisFilter
	deadRedisFilter // pointed at a closed port
)

type testBundle struct {
	ctx      context.Context
	db       *dbtest.DB
	rec      *connectortest.Recorder
	srv      *httptest.Server
	handler  http.Handler
	client   *jobs.Client
	filterFn func() // flushes the filter's keys, when there is one
	// operators holds the credentials; token is operator ana's.
	operators *operators.Service
	token     string
}

type setupOpts struct {
	filter filterMode
	// pool, when set, is what intake writes through (for outage tests).
	pool func(d *dbtest.DB) *pgxpool.Pool
	// answer, when set, is the connector's answer (default: done).
	answer func(context.Context, connector.Request) connector.Result
	// now, when set, is the server's clock.
	now func() time.Time
	// publicURL, when set, is GUARDIAN_PUBLIC_URL.
	publicURL string
	// trustedProxies is GUARDIAN_TRUSTED_PROXIES.
	trustedProxies []string
	// logs, when set, receives the server's debug log.
	logs io.Writer
	// sweepInterval, when set, is how often the leader sweeps.
	sweepInterval time.Duration
	// reconcileInterval, when set, is how often the leader reconciles.
	reconcileInterval time.Duration
	// fulfilment, when set, adjusts the domain's configuration.
	fulfilment func(*fulfilment.Config)
	// shopifyShops is GUARDIAN_SHOPIFY_SHOPS.
	shopifyShops []string
	// stripeMode is GUARDIAN_MODE for every provider (the samples' are
	// live, but Adyen's test).
	stripeMode provider.Mode
	// maxBody is GUARDIAN_MAX_BODY_BYTES; 64 KiB when zero.
	maxBody int64
	// payPalEvent, when set, is PayPal's API as the PayPal provider
	// confirms deliveries with it (provider.PayPalConfig.Event).
	payPalEvent func(ctx context.Context, id string) ([]byte, error)
	// vars are more settings for the providers.
	vars map[string]string
}

func setup(t *testing.T, opts setupOpts) *testBundle {
	t.Helper()
	ctx := context.Background()
	d := dbtest.NewDB(t)
	logger := slog.New(slog.DiscardHandler)
	if opts.logs != nil {
		logger = slog.New(slog.NewTextHandler(opts.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	rec := &connectortest.Recorder{Answer: opts.answer}
	b := &testBundle{ctx: ctx, db: d, rec: rec}
	var f filter.Filter
	var err error
	switch opts.filter {
	case redisFilter:
		rc, prefix := redistest.Client(t)
		// Generous timeouts: these tests assert what the filter saves, and a
		// slow machine must not turn that into a fall-through. Failing open
		// is tested with deadRedisFilter and in package filter.
		f, err = filter.NewRedis(filter.RedisConfig{Client: rc, Prefix: prefix, Epoch: "test", Timeout: 5 * time.Second})
		require.NoError(t, err)
		b.filterFn = func() { redistest.DeletePrefix(t, rc, prefix) }
	case deadRedisFilter:
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		fc, err := filter.NewRedisClient("redis://" + addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = fc.Close() })
		f, err = filter.NewRedis(filter.RedisConfig{Client: fc, Epoch: "test", Backoff: time.Millisecond})
		require.NoError(t, err)
	}
	pool := d.Pool
	if opts.pool != nil {
		pool = opts.pool(d)
	}
	st := jobstest.New(t, d, rec, jobstest.Options{Fulfilment: func(c *fulfilment.Config) {
		c.Store, c.Filter = db.New(pool), f
		if opts.fulfilment != nil {
			opts.fulfilment(c)
		}
	}, Jobs: func(c *jobs.Config) {
		c.SweepInterval = cmp.Or(opts.sweepInterval, c.SweepInterval)
		c.ReconcileInterval = cmp.Or(opts.reconcileInterval, c.ReconcileInterval)
	}})
	st.Start(t)
	service, client := st.Service, st.Client
	vars := maps.Clone(opts.vars)
	if vars == nil {
		vars = map[string]string{}
	}
	if opts.stripeMode != "" {
		vars["GUARDIAN_MODE"] = string(opts.stripeMode)
	}
	if len(opts.shopifyShops) > 0 {
		vars["GUARDIAN_SHOPIFY_SHOPS"] = strings.Join(opts.shopifyShops, ",")
	}
	var providers []provider.Provider
	for _, sample := range providertest.Samples() {
		p := sample.Build(t, vars)
		if sample.Name == "paypal" && opts.payPalEvent != nil {
			p = providertest.OpenPayPal(t, sample.Settings, opts.payPalEvent)
		}
		providers = append(providers, p)
	}
	ui, err := riverui.NewHandler(&riverui.HandlerOpts{Endpoints: riverui.NewEndpoints(client.River(), nil), Logger: logger, Prefix: "/riverui"})
	require.NoError(t, err)
	b.operators = operators.New(db.New(d.Pool), []string{"old-operator-token", adminToken})
	b.token, _, err = b.operators.Add(ctx, "ana")
	require.NoError(t, err)
	key, err := b.operators.SessionKey(ctx)
	require.NoError(t, err)
	s, err := web.New(web.Config{
		Providers: providers, Service: service, Logger: logger,
		Ready: func(ctx context.Context) error { return d.Pool.Ping(ctx) }, MaxBodyBytes: cmp.Or(opts.maxBody, 64<<10),
		Operators: b.operators, SessionKey: key, Store: db.New(d.Pool),
		RiverUI: ui, Tokens: tokens.New(tokens.Postgres{Store: db.New(d.Pool)}, nil),
		Now: opts.now, SessionTTL: time.Hour, PublicURL: opts.publicURL, TrustedProxies: opts.trustedProxies,
	})
	require.NoError(t, err)
	b.client = client
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	b.handler = s.Handler()
	b.srv = httptest.NewServer(b.handler)
	t.Cleanup(b.srv.Close)
	return b
}

type answer struct {
	code int
	body map[string]string
	raw  []byte
}

func (b *testBundle) post(t *testing.T, path string, header http.Header, body []byte) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+path, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header = header.Clone()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var m map[string]string
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	_ = json.Unmarshal(raw, &m)
	return answer{code: resp.StatusCode, body: m, raw: raw}
}

func (b *testBundle) postStripe(t *testing.T, body string) answer {
	t.Helper()
	return b.post(t, "/webhooks/stripe", providertest.SignStripe([]byte(body), stripeSecret, time.Now()), []byte(body))
}

// waitFulfilled waits until every fulfilment of the payment is fulfilled and
// returns how many there are.
func (b *testBundle) waitFulfilled(t *testing.T, paymentID string) int {
	t.Helper()
	var fs []db.Fulfilment
	require.Eventually(t, func() bool {
		var err error
		fs, err = db.FulfilmentsByPayment(b.ctx, b.db.Pool, "stripe", paymentID)
		require.NoError(t, err)
		for _, f := range fs {
			if f.State != "fulfilled" {
				return false
			}
		}
		return len(fs) > 0
	}, 15*time.Second, 10*time.Millisecond)
	return len(fs)
}

func intentEvent(eventID, paymentID string) string {
	return fmt.Sprintf(`{"id":%q,"object":"event","type":"checkout.session.completed","data":{"object":{"id":"cs_%s","object":"checkout.session","mode":"payment","payment_status":"paid","payment_intent":%q}}}`, eventID, eventID, paymentID)
}

func checkoutEvent(eventID, paymentID string) string {
	return fmt.Sprintf(`{"id":%q,"object":"event","type":"checkout.session.async_payment_succeeded","data":{"object":{"id":"cs_%s","object":"checkout.session","mode":"payment","payment_status":"paid","payment_intent":%q}}}`, eventID, eventID, paymentID)
}

// storm sends each body n times, all at once, and returns the answers.
func (b *testBundle) storm(t *testing.T, n int, bodies ...string) []answer {
	t.Helper()
	answers := make([]answer, n*len(bodies))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range answers {
		wg.Go(func() {
			<-start
			answers[i] = b.postStripe(t, bodies[i%len(bodies)])
		})
	}
	close(start)
	wg.Wait()
	return answers
}

func TestConcurrentDuplicateDeliveries(t *testing.T) {
	t.Parallel()

	for _, mode := range []struct {
		name string
		mode filterMode
	}{{"WithoutRedis", noFilter}, {"WithRedis", redisFilter}, {"WithRedisDown", deadRedisFilter}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{filter: mode.mode})
			answers := b.storm(t, 64, intentEvent("evt_storm", "pi_storm"))
			accepted := 0
			for _, a := range answers {
				require.Equal(t, http.StatusOK, a.code)
				if a.body["status"] == "accepted" {
					accepted++
				} else {
					require.Equal(t, "duplicate", a.body["status"])
				}
			}
			require.Equal(t, 1, accepted, "exactly one delivery stores the event")
			require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM webhook_event`))
			require.Equal(t, 1, b.waitFulfilled(t, "pi_storm"))
			require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'guardian_dispatch'`))
			require.Equal(t, 1, b.rec.CallsForPayment("pi_storm"), "one connector call")
			deliveries := b.db.Count(t, `SELECT deliveries FROM webhook_event`)
			if mode.mode == noFilter || mode.mode == deadRedisFilter {
				require.Equal(t, 64, deliveries, "every delivery reached Postgres and was counted")
			} else {
				require.LessOrEqual(t, deliveries, 64)
			}

			// Later duplicates: with the filter they never reach Postgres.
			before := b.db.Count(t, `SELECT deliveries FROM webhook_event`)
			for range 5 {
				a := b.postStripe(t, intentEvent("evt_storm", "pi_storm"))
				require.Equal(t, http.StatusOK, a.code)
				require.Equal(t, "duplicate", a.body["status"])
			}
			after := b.db.Count(t, `SELECT deliveries FROM webhook_event`)
			if mode.mode == redisFilter {
				require.Equal(t, before, after, "the filter answered without touching Postgres")
			} else {
				require.Equal(t, before+5, after)
			}
		})
	}
}

func TestTwoEventTypesForOnePaymentFulfilOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	answers := b.storm(t, 16, checkoutEvent("evt_cs", "pi_both"), intentEvent("evt_pi", "pi_both"))
	for _, a := range answers {
		require.Equal(t, http.StatusOK, a.code)
	}
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM webhook_event`), "both events are stored")
	require.Equal(t, 1, b.waitFulfilled(t, "pi_both"))
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment`))
	require.Equal(t, 1, b.rec.CallsForPayment("pi_both"))
}

func TestRedisFlushedMidRun(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{filter: redisFilter})
	for i := range 20 {
		body := intentEvent(fmt.Sprintf("evt_%d", i%5), fmt.Sprintf("pi_%d", i%5))
		a := b.postStripe(t, body)
		require.Equal(t, http.StatusOK, a.code)
		if i%4 == 3 {
			b.filterFn() // the filter forgets everything
		}
	}
	require.Equal(t, 5, b.db.Count(t, `SELECT count(*) FROM webhook_event`))
	require.Equal(t, 5, b.db.Count(t, `SELECT count(*) FROM fulfilment`))
	for i := range 5 {
		require.Equal(t, 1, b.waitFulfilled(t, fmt.Sprintf("pi_%d", i)))
		require.Equal(t, 1, b.rec.CallsForPayment(fmt.Sprintf("pi_%d", i)))
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{filter: redisFilter})

	good := []byte(intentEvent("evt_1", "pi_1"))
	now := time.Now()
	sign := func(body []byte, at time.Time) http.Header { return providertest.SignStripe(body, stripeSecret, at) }
	dupKeys := []byte(`{"id":"evt_1","id":"evt_2","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1"}}}`)
	huge := []byte(`{"id":"evt_big","type":"x","data":{"object":{"pad":"` + strings.Repeat("a", 70<<10) + `"}}}`)
	stdBody := []byte(`{"type":"payment.succeeded","data":{"payment_id":"pay_1"}}`)
	stdStale, err := providertest.SignStandard("msg_1", stdBody, standardSecret, now.Add(-time.Hour))
	require.NoError(t, err)
	stdWrong, err := providertest.SignStandard("msg_1", stdBody, "whsec_c2Vjb25kIHNlY3JldCBmb3Igcm90YXRpb24=", now)
	require.NoError(t, err)

	tests := []struct {
		name   string
		path   string
		header http.Header
		body   []byte
		code   int
		reason string
	}{
		{"WrongSecret", "/webhooks/stripe", providertest.SignStripe(good, "whsec_wrong", now), good, 400, "bad signature"},
		{"NoSignature", "/webhooks/stripe", http.Header{}, good, 400, "bad signature"},
		{"Stale", "/webhooks/stripe", sign(good, now.Add(-10*time.Minute)), good, 400, "timestamp outside tolerance"},
		{"Future", "/webhooks/stripe", sign(good, now.Add(10*time.Minute)), good, 400, "timestamp outside tolerance"},
		{"DuplicateKeys", "/webhooks/stripe", sign(dupKeys, now), dupKeys, 400, "malformed event"},
		{"NotJSON", "/webhooks/stripe", sign([]byte("{nope"), now), []byte("{nope"), 400, "malformed event"},
		{"TooLarge", "/webhooks/stripe", sign(huge, now), huge, 413, "body too large"},
		{"UnknownProvider", "/webhooks/mollie", sign(good, now), good, 404, "unknown provider"},
		{"StandardStale", "/webhooks/standard", stdStale, stdBody, 400, "timestamp outside tolerance"},
		{"StandardWrongSecret", "/webhooks/standard", stdWrong, stdBody, 400, "bad signature"},
	}
	for _, tt := range tests {
		a := b.post(t, tt.path, tt.header, tt.body)
		require.Equal(t, tt.code, a.code, tt.name)
		require.True(t, strings.HasPrefix(a.body["error"], tt.reason), "%s: %q", tt.name, a.body["error"])
		require.NotContains(t, a.body["error"], stripeSecret)
	}
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM webhook_event`))
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM fulfilment`))
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'guardian_dispatch'`))
	require.Empty(t, b.rec.Calls())
}

func TestNonFulfillingTypeIsStoredOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	a := b.postStripe(t, `{"id":"evt_cus","type":"customer.created","data":{"object":{"id":"cus_1"}}}`)
	require.Equal(t, http.StatusOK, a.code)
	require.Equal(t, "accepted", a.body["status"])
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_cus' AND payment_id IS NULL`))
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM fulfilment`))
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'guardian_dispatch'`))
}

// TestTheSignedBytesAreKeptAndHandedOn: a validly signed body that jsonb
// would refuse or rewrite (an escaped NUL, spacing, key order) is stored
// once, exactly, and reaches the connector exactly.
func TestTheSignedBytesAreKeptAndHandedOn(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	body := "{\"type\":\"checkout.session.completed\", \"id\":\"evt_nul\",\n \"data\":{\"object\":{\"id\":\"cs_nul\",\"payment_status\":\"paid\",\"payment_intent\":\"pi_nul\",\"note\":\"a\\u0000b <i>\"}}}"
	for range 2 {
		require.Equal(t, http.StatusOK, b.postStripe(t, body).code)
	}
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE body = $1`, []byte(body)))
	require.Equal(t, 1, b.waitFulfilled(t, "pi_nul"))
	calls := b.rec.Calls()
	require.Len(t, calls, 1)
	require.Equal(t, body, string(calls[0].Payload), "the connector gets the bytes as signed")
}

func TestStandardWebhooksFulfil(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	body := []byte(`{"type":"payment.succeeded","data":{"payment_id":"pay_std"}}`)
	h, err := providertest.SignStandard("msg_std", body, standardSecret, time.Now())
	require.NoError(t, err)
	for range 3 {
		a := b.post(t, "/webhooks/standard", h, body)
		require.Equal(t, http.StatusOK, a.code)
	}
	require.Eventually(t, func() bool { return b.rec.CallsForPayment("pay_std") == 1 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE provider = 'standard' AND payment_id = 'pay_std'`))
	require.Equal(t, 3, b.db.Count(t, `SELECT deliveries FROM webhook_event WHERE event_id = 'msg_std'`))
}

func TestPostgresOutage(t *testing.T) {
	t.Parallel()
	var proxy *faultproxy.Proxy
	b := setup(t, setupOpts{pool: func(d *dbtest.DB) *pgxpool.Pool {
		u, err := url.Parse(d.URL)
		require.NoError(t, err)
		proxy, err = faultproxy.New(u.Host)
		require.NoError(t, err)
		t.Cleanup(proxy.Close)
		u.Host = proxy.Addr()
		q := u.Query()
		q.Set("connect_timeout", "2")
		u.RawQuery = q.Encode()
		pool, err := pgxpool.New(context.Background(), u.String())
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return pool
	}})

	body := intentEvent("evt_outage", "pi_outage")
	// Warm the pool so the outage also cuts live connections.
	require.Equal(t, http.StatusOK, b.postStripe(t, intentEvent("evt_before", "pi_before")).code)

	proxy.Down()
	for range 3 {
		a := b.postStripe(t, body)
		require.Equal(t, http.StatusServiceUnavailable, a.code, "no 2xx without a commit")
		require.Equal(t, "storage unavailable, retry later", a.body["error"])
	}
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_outage'`))

	require.NoError(t, proxy.Up())
	var a answer
	require.Eventually(t, func() bool { // the provider's retry
		a = b.postStripe(t, body)
		return a.code == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, "accepted", a.body["status"])
	require.Equal(t, "duplicate", b.postStripe(t, body).body["status"])
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_outage'`))
	require.Equal(t, 1, b.waitFulfilled(t, "pi_outage"))
	require.Equal(t, 1, b.rec.CallsForPayment("pi_outage"))
}

func TestHealth(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(b.srv.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
	}
}

// TestRefusalsAreLoggedWithTheirReason: a merchant wiring up a provider
// watches the server log; each refused delivery says why there, at most one
// line a second for each provider and reason, with how many were held back.
func TestRefusalsAreLoggedWithTheirReason(t *testing.T) {
	t.Parallel()
	var logs logtest.Buffer
	now := time.Now()
	var clock atomic.Int64
	clock.Store(now.UnixNano())
	b := setup(t, setupOpts{logs: &logs, now: func() time.Time { return time.Unix(0, clock.Load()) }})
	body := []byte(`{"id":"evt_log","type":"payment_intent.succeeded","data":{"object":{"id":"pi_log","status":"succeeded"}}}`)

	forged := providertest.SignStripe(body, "whsec_not_the_endpoints_secret_at_all_0000", now)
	for range 3 {
		require.Equal(t, http.StatusBadRequest, b.post(t, "/webhooks/stripe", forged, body).code)
	}
	require.Equal(t, http.StatusBadRequest, b.post(t, "/webhooks/stripe", http.Header{}, body).code)
	stale := providertest.SignStripe(body, stripeSecret, now.Add(-time.Hour))
	require.Equal(t, http.StatusBadRequest, b.post(t, "/webhooks/stripe", stale, body).code)

	lines := func(reason string) []string {
		var out []string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, `msg="webhook refused"`) && strings.Contains(l, "reason="+reason) {
				out = append(out, l)
			}
		}
		return out
	}
	sig := lines("signature")
	require.Len(t, sig, 1, "one line a second per provider and reason")
	require.Contains(t, sig[0], "no configured secret matched the signature")
	require.NotContains(t, logs.String(), stripeSecret)
	ts := lines("timestamp")
	require.Len(t, ts, 1)
	require.Contains(t, ts[0], "outside the tolerance window")

	clock.Add(int64(2 * time.Second))
	require.Equal(t, http.StatusBadRequest, b.post(t, "/webhooks/stripe", http.Header{}, body).code)
	sig = lines("signature")
	require.Len(t, sig, 2)
	require.Contains(t, sig[1], "missing or unreadable Stripe-Signature header")
	require.Contains(t, sig[1], "refused_since_last_line=3", "the three held back are counted")
}
