package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/db/dbtest"
)

// TestDeliveriesBecomeOneFulfilmentEach drives the real binary: 20 payments,
// each announced by two Stripe event types, each delivered three times, 16 at
// once, plus Standard Webhooks deliveries, and Adyen deliveries of two
// notification items each, each delivered three times; the connector must
// see each payment exactly once.
func TestDeliveriesBecomeOneFulfilmentEach(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	conn := newFakeConnector(t)
	e := baseEnv(t, d, conn)
	e["GUARDIAN_ADYEN_HMAC_KEYS"] = adyenKey
	g := start(t, e)

	type delivery struct {
		path   string
		header http.Header
		body   []byte
	}
	var deliveries []delivery
	now := time.Now()
	for i := range 20 {
		pi := fmt.Sprintf("pi_bb_%d", i)
		for _, body := range []string{
			fmt.Sprintf(`{"id":"evt_cs_%d","type":"checkout.session.completed","data":{"object":{"id":"cs_%d","payment_status":"paid","payment_intent":%q}}}`, i, i, pi),
			fmt.Sprintf(`{"id":"evt_pi_%d","type":"payment_intent.succeeded","data":{"object":{"id":%q}}}`, i, pi),
		} {
			for range 3 {
				deliveries = append(deliveries, delivery{"/webhooks/stripe", providertest.SignStripe([]byte(body), stripeSecret, now), []byte(body)})
			}
		}
		std := []byte(fmt.Sprintf(`{"type":"payment.succeeded","data":{"payment_id":"pay_bb_%d"}}`, i))
		h, err := providertest.SignStandard(fmt.Sprintf("msg_bb_%d", i), std, standardSecret, now)
		require.NoError(t, err)
		deliveries = append(deliveries, delivery{"/webhooks/standard", h, std}, delivery{"/webhooks/standard", h, std})
		if i%2 == 1 { // two Adyen payments a delivery
			var items []providertest.AdyenItem
			for _, n := range []int{i - 1, i} {
				items = append(items, providertest.AdyenItem{EventCode: "AUTHORISATION", PSPReference: fmt.Sprintf("PSPBB%d", n), MerchantAccount: "Shop", Value: 500, Currency: "EUR", Success: true})
			}
			body, err := providertest.SignAdyen(items, adyenKey, true)
			require.NoError(t, err)
			for range 3 {
				deliveries = append(deliveries, delivery{"/webhooks/adyen", http.Header{"Content-Type": {"application/json"}}, body})
			}
		}
	}

	codes := make([]int, len(deliveries))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i, dl := range deliveries {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			codes[i] = g.post(t, dl.path, dl.header, dl.body)
		})
	}
	wg.Wait()
	for i, c := range codes {
		require.Equal(t, http.StatusOK, c, "delivery %d", i)
	}

	require.Eventually(t, func() bool { return stateCount(t, d, "fulfilled") == 60 }, 30*time.Second, 20*time.Millisecond)
	calls := conn.snapshot()
	require.Len(t, calls, 60, "one fulfilment per payment reached the connector")
	for key, n := range calls {
		require.Equal(t, 1, n, "fulfilment %s called %d times", key, n)
	}

	forged := []byte(`{"id":"evt_forged","type":"checkout.session.completed","data":{"object":{"id":"cs_pi_forged","payment_status":"paid","payment_intent":"pi_forged"}}}`)
	require.Equal(t, http.StatusBadRequest, g.post(t, "/webhooks/stripe", providertest.SignStripe(forged, "whsec_attacker", now), forged))

	// The metrics tell the same story as the connector and the tables.
	m := g.scrape(t)
	require.Equal(t, 40.0, m[`guardian_deliveries_total{outcome="new",provider="stripe"}`])
	require.Equal(t, 80.0, m[`guardian_deliveries_total{outcome="duplicate_filter",provider="stripe"}`]+m[`guardian_deliveries_total{outcome="duplicate_postgres",provider="stripe"}`])
	require.Equal(t, 20.0, m[`guardian_deliveries_total{outcome="new",provider="standard"}`])
	require.Equal(t, 20.0, m[`guardian_deliveries_total{outcome="duplicate_filter",provider="standard"}`]+m[`guardian_deliveries_total{outcome="duplicate_postgres",provider="standard"}`])
	// A delivery counts as new when it stored any of its items: copies of
	// one delivery racing each other may each store one of its two.
	adyenNew := m[`guardian_deliveries_total{outcome="new",provider="adyen"}`]
	require.GreaterOrEqual(t, adyenNew, 10.0)
	require.Equal(t, 30.0, adyenNew+m[`guardian_deliveries_total{outcome="duplicate_filter",provider="adyen"}`]+m[`guardian_deliveries_total{outcome="duplicate_postgres",provider="adyen"}`])
	require.Equal(t, 20, d.Count(t, `SELECT count(*) FROM webhook_event WHERE provider = 'adyen'`), "each item stored once")
	require.Equal(t, 1.0, m[`guardian_deliveries_total{outcome="rejected_signature",provider="stripe"}`])
	require.Equal(t, 121.0, m[`guardian_intake_duration_seconds_count{provider="stripe"}`])
	require.Equal(t, 60.0, m[`guardian_dispatches_total{action="fulfil",outcome="done"}`])
	require.Equal(t, 60.0, m[`guardian_transitions_total{action="fulfil",from="pending",to="dispatching"}`])
	require.Equal(t, 60.0, m[`guardian_transitions_total{action="fulfil",from="dispatching",to="fulfilled"}`])
	require.Equal(t, 60.0, m[`guardian_transitions_total{action="fulfil",from="none",to="pending"}`])
	g.waitGauge(t, `guardian_fulfilments{state="fulfilled"}`, 60)
	m = g.scrape(t)
	require.Equal(t, 0.0, m[`guardian_reconciliation_queue_depth`])
	require.Contains(t, m, `guardian_reconciliation_oldest_age_seconds`)
	require.Equal(t, 0.0, m[`guardian_table_scrape_error`])
	resp, err := http.Get(g.url + "/metrics")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "metrics are not on the public listener")
	require.NotContains(t, g.logs(), stripeSecret, "no secret in logs")
	require.NotContains(t, g.logs(), connectorSecret, "no secret in logs")

	g.stop(t)
}

// TestCrashMidCallIsParkedNotRepeated kills guardian while the connector
// holds a call open, restarts it, and checks the fulfilment ends
// needs_reconciliation without a second call.
func TestCrashMidCallIsParkedNotRepeated(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	conn := newFakeConnector(t)
	conn.hold = "pi_crash"
	e := baseEnv(t, d, conn)
	e["GUARDIAN_CONNECTOR_TIMEOUT"] = "1s"
	e["GUARDIAN_DISPATCH_LEASE"] = "17s"
	e["GUARDIAN_SWEEP_INTERVAL"] = "1s"
	g := start(t, e)

	body := []byte(`{"id":"evt_crash","type":"checkout.session.completed","data":{"object":{"id":"cs_pi_crash","payment_status":"paid","payment_intent":"pi_crash"}}}`)
	require.Equal(t, http.StatusOK, g.post(t, "/webhooks/stripe", providertest.SignStripe(body, stripeSecret, time.Now()), body))
	key := <-conn.entered // the call is in flight
	g.kill(t)
	require.Equal(t, 1, stateCount(t, d, "dispatching"), "the crash left the row dispatching")

	g2 := start(t, e)
	require.Eventually(t, func() bool { return stateCount(t, d, "needs_reconciliation") == 1 }, 45*time.Second, 100*time.Millisecond)
	require.Equal(t, map[string]int{key: 1}, conn.snapshot(), "the connector was not called again")
	g2.waitGauge(t, `guardian_reconciliation_queue_depth`, 1)
	m := g2.scrape(t)
	require.Greater(t, m[`guardian_reconciliation_oldest_age_seconds`], 0.0)
	require.Equal(t, 1.0, m[`guardian_transitions_total{action="fulfil",from="dispatching",to="needs_reconciliation"}`], "the restarted process parked it")
	g2.stop(t)
}

// TestMigrateCommand runs `guardian migrate status|down|up` against a fresh database.
func TestMigrateCommand(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	run := func(args ...string) (string, int) {
		cmd := exec.Command(binary, append([]string{"migrate"}, args...)...)
		cmd.Env = []string{"DATABASE_URL=" + d.URL}
		out, err := cmd.CombinedOutput()
		if exit, ok := err.(*exec.ExitError); ok {
			return string(out), exit.ExitCode()
		}
		require.NoError(t, err)
		return string(out), 0
	}
	out, code := run("status")
	require.Zero(t, code, out)
	require.Contains(t, out, "00009_guardian.sql")
	require.NotContains(t, out, "pending")

	files, err := filepath.Glob("../goose/migrations/*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	out, code = run("down")
	require.Zero(t, code, out)
	require.Contains(t, out, "rolled back "+filepath.Base(files[len(files)-1]), "down rolls back the newest migration")
	out, _ = run("status")
	require.Contains(t, out, "pending")

	out, code = run("up")
	require.Zero(t, code, out)
	out, _ = run("status")
	require.NotContains(t, out, "pending")

	_, code = run("sideways")
	require.Equal(t, 2, code)
}

// TestRedisDownFailsOpen points the filter at a port where nothing listens:
// every delivery is still answered from Postgres, and the fallbacks are counted.
func TestRedisDownFailsOpen(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	conn := newFakeConnector(t)
	e := baseEnv(t, d, conn)
	e["REDIS_URL"] = "redis://" + freeAddr(t)
	e["GUARDIAN_PPROF"] = "true"
	g := start(t, e)
	resp, err := http.Get(g.metricsURL + "/debug/pprof/cmdline")
	require.NoError(t, err, "pprof serves on the operations listener when GUARDIAN_PPROF is set")
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body := []byte(`{"id":"evt_rd","type":"checkout.session.completed","data":{"object":{"id":"cs_pi_rd","payment_status":"paid","payment_intent":"pi_rd"}}}`)
	for range 3 {
		require.Equal(t, http.StatusOK, g.post(t, "/webhooks/stripe", providertest.SignStripe(body, stripeSecret, time.Now()), body))
	}
	require.Eventually(t, func() bool { return stateCount(t, d, "fulfilled") == 1 }, 15*time.Second, 20*time.Millisecond)
	m := g.scrape(t)
	require.Equal(t, 1.0, m[`guardian_deliveries_total{outcome="new",provider="stripe"}`])
	require.Equal(t, 2.0, m[`guardian_deliveries_total{outcome="duplicate_postgres",provider="stripe"}`])
	require.Greater(t, m[`guardian_filter_errors_total{op="check"}`], 0.0)
	require.Len(t, conn.snapshot(), 1)
	g.stop(t)
}

// TestRestoreRunbook follows docs/operations.md's restore runbook: a
// database that lost committed events (a point-in-time restore, simulated
// by deleting them) gets a new epoch, and the provider's redelivery of a
// lost event is then stored, not answered "duplicate" from a Redis mark
// that vouched for the old database.
func TestRestoreRunbook(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	conn := newFakeConnector(t)
	e := baseEnv(t, d, conn)
	g := start(t, e)
	body := []byte(`{"id":"evt_lost","type":"customer.created","data":{"object":{"id":"cus_1"}}}`)
	require.Equal(t, http.StatusOK, g.post(t, "/webhooks/stripe", providertest.SignStripe(body, stripeSecret, time.Now()), body))
	require.Equal(t, 1, d.Count(t, `SELECT count(*) FROM webhook_event`))
	g.stop(t)

	// The restore: the database no longer holds the event; Redis still
	// holds its mark.
	_, err := d.Pool.Exec(context.Background(), `TRUNCATE webhook_event, fulfilment_identity, fulfilment_move, fulfilment_transition, fulfilment_check`)
	require.NoError(t, err)

	epoch := func(verb string) string {
		cmd := exec.Command(binary, "epoch", verb)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + d.URL}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
		return strings.TrimSpace(string(out))
	}
	before := epoch("show")
	rotated := epoch("rotate")
	require.NotEqual(t, before, rotated)
	require.Equal(t, rotated, epoch("show"))

	g = start(t, e)
	require.Equal(t, http.StatusOK, g.post(t, "/webhooks/stripe", providertest.SignStripe(body, stripeSecret, time.Now()), body))
	require.Equal(t, 1, d.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_lost'`), "the redelivered event is stored again")
	g.stop(t)
}

// TestStartSaysWhatIsMissing: tried as a new user would. A configured
// Redis that does not answer is said at start and in /readyz's answer,
// which stays ready (Redis only saves work); a misspelt variable is
// warned about; a busy operations port stops the start before anything
// says "listening".
func TestStartSaysWhatIsMissing(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	e := baseEnv(t, d, newFakeConnector(t))
	e["REDIS_URL"] = "redis://" + freeAddr(t) + "/0" // nothing listens there
	e["GUARDIAN_LOG_LEVLE"] = "info"
	g := start(t, e)
	resp, err := http.Get(g.url + "/readyz")
	require.NoError(t, err)
	var ready map[string]string
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&ready))
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "ready", ready["status"])
	require.Contains(t, ready["redis"], "unreachable")
	require.Eventually(t, func() bool { return strings.Contains(g.logs(), `"msg":"redis unreachable`) }, 5*time.Second, 20*time.Millisecond)
	require.Contains(t, g.logs(), "GUARDIAN_LOG_LEVLE is not a variable Guardian reads: it is ignored (did you mean GUARDIAN_LOG_LEVEL?)")
	g.stop(t)

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	cmd := exec.Command(binary, "serve")
	cmd.Env = []string{"GUARDIAN_ADDR=" + freeAddr(t), "GUARDIAN_METRICS_ADDR=" + busy.Addr().String()}
	for k, v := range baseEnv(t, d, newFakeConnector(t)) {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "a busy operations port stops the start")
	require.Contains(t, string(out), "GUARDIAN_METRICS_ADDR")
	require.NotContains(t, string(out), `"msg":"listening"`, "nothing said it was listening")
}

// TestSaysWhenCommitsCanBeLost: a database whose synchronous_commit is off
// can lose deliveries Guardian acknowledged; Guardian says so at start.
func TestSaysWhenCommitsCanBeLost(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	_, err := d.Pool.Exec(context.Background(), `ALTER DATABASE `+d.Name+` SET synchronous_commit = off`)
	require.NoError(t, err)
	g := start(t, baseEnv(t, d, newFakeConnector(t)))
	require.Contains(t, g.logs(), "synchronous_commit is off")

	on := dbtest.NewDB(t)
	g = start(t, baseEnv(t, on, newFakeConnector(t)))
	require.NotContains(t, g.logs(), "synchronous_commit")
	require.NotContains(t, g.logs(), "index is invalid")
}

// TestSaysWhenAnIndexIsInvalid: an index whose build was interrupted is
// left invalid, kept on every write and never read; Guardian names it at
// start, with the statement that rebuilds it.
func TestSaysWhenAnIndexIsInvalid(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	// What an interrupted CREATE INDEX CONCURRENTLY leaves behind.
	_, err := d.Pool.Exec(context.Background(), `
		CREATE INDEX webhook_event_half_built ON webhook_event (event_type);
		UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'webhook_event_half_built'::regclass`)
	require.NoError(t, err)
	g := start(t, baseEnv(t, d, newFakeConnector(t)))
	logs := g.logs()
	require.Contains(t, logs, "index is invalid")
	require.Contains(t, logs, "REINDEX INDEX CONCURRENTLY webhook_event_half_built")
}
