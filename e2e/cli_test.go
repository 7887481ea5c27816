package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db/dbtest"
	"github.com/guardian-pay/guardian/receiver"
	"github.com/guardian-pay/guardian/web"
)

// cli runs the guardian binary's operator commands against g.
func cli(t *testing.T, g *guardian, token string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{"GUARDIAN_URL=" + g.url, "GUARDIAN_OPERATOR_TOKEN=" + token}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return stdout.String() + stderr.String(), code
}

// operatorsCLI runs `guardian operators ...` on d's database.
func operatorsCLI(t *testing.T, d *dbtest.DB, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"operators"}, args...)...)
	cmd.Env = []string{"DATABASE_URL=" + d.URL}
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), errOut.String(), code
}

// addOperator makes a named credential with the CLI and returns its token.
func addOperator(t *testing.T, d *dbtest.DB, name string) string {
	t.Helper()
	out, errOut, code := operatorsCLI(t, d, "add", name)
	require.Zero(t, code, errOut)
	token := strings.TrimSpace(out)
	require.True(t, strings.HasPrefix(token, "gop_"), "stdout holds only the token: %q", out)
	return token
}

// TestOperatorCLI parks a fulfilment (the connector answers 500) and works
// it with the CLI, as an operator would.
func TestOperatorCLI(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	conn := newFakeConnector(t)
	conn.fail = "pi_cli"
	g := start(t, baseEnv(t, d, conn))

	body := []byte(`{"id":"evt_cli","type":"checkout.session.completed","data":{"object":{"id":"cs_pi_cli","payment_status":"paid","payment_intent":"pi_cli"}}}`)
	require.Equal(t, http.StatusOK, g.post(t, "/webhooks/stripe", providertest.SignStripe(body, stripeSecret, time.Now()), body))
	require.Eventually(t, func() bool { return stateCount(t, d, "needs_reconciliation") == 1 }, 15*time.Second, 20*time.Millisecond)

	ana, bo := addOperator(t, d, "ana"), addOperator(t, d, "bo")
	out, code := cli(t, g, ana, "reconcile", "list", "--json")
	require.Zero(t, code, out)
	var list web.FulfilmentList
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Fulfilments, 1)
	id := list.Fulfilments[0].ID
	require.Equal(t, "pi_cli", list.Fulfilments[0].PaymentID)

	out, code = cli(t, g, ana, "reconcile", "list")
	require.Zero(t, code, out)
	require.Contains(t, out, "PARKED FOR")
	require.Contains(t, out, id)

	out, code = cli(t, g, ana, "fulfilments", "show", id, "--json")
	require.Zero(t, code, out)
	var detail web.FulfilmentDetail
	require.NoError(t, json.Unmarshal([]byte(out), &detail))
	require.Equal(t, state.State("needs_reconciliation"), detail.Fulfilment.State)
	require.Contains(t, string(detail.Transitions[len(detail.Transitions)-1].Evidence), `"status":500`)

	out, code = cli(t, g, ana, "fulfilments", "show", id)
	require.Zero(t, code, out)
	require.Contains(t, out, "connector outcome: unknown")

	// Missing evidence: refused, exit 2, nothing changed.
	out, code = cli(t, g, ana, "reconcile", "resolve", id, "--attempt", "1", "--to", "fulfilled", "--reason", "confirmed")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "evidence")

	out, code = cli(t, g, ana, "reconcile", "resolve", id, "--attempt", "1", "--to", "fulfilled", "--reason", "receiver confirmed", "--evidence", "receiver log line 42")
	require.Zero(t, code, out)
	require.Contains(t, out, "is now fulfilled")

	out, code = cli(t, g, bo, "reconcile", "resolve", id, "--attempt", "1", "--to", "cancelled", "--reason", "too late")
	require.Equal(t, 4, code, "a second resolution conflicts: %s", out)

	out, code = cli(t, g, ana, "events", "show", "stripe", "evt_cli", "--json")
	require.Zero(t, code, out)
	var ev web.EventDetail
	require.NoError(t, json.Unmarshal([]byte(out), &ev))
	require.Equal(t, state.State("fulfilled"), ev.Fulfilments[0].State)

	out, code = cli(t, g, ana, "events", "replay", "stripe", "evt_cli", "--json")
	require.Zero(t, code, out)
	require.JSONEq(t, `{"result":"already_fulfilled_or_in_flight"}`, out)

	_, code = cli(t, g, ana, "fulfilments", "show", "0b6f3c38-8a7e-4a57-9d0e-2d1f4f6a4b11")
	require.Equal(t, 3, code)
	_, code = cli(t, g, "not-the-token", "reconcile", "list")
	require.Equal(t, 5, code)
	_, code = cli(t, g, ana, "reconcile", "dance")
	require.Equal(t, 2, code)

	require.Equal(t, 1, d.Count(t, `SELECT count(*) FROM fulfilment_transition WHERE fulfilment_id = $1 AND actor = 'operator ana' AND to_state = 'fulfilled'`, id),
		"the audit actor is the credential's operator")

	// Credentials: listed without their tokens; a revoked one is refused
	// at once, the other operator's is not.
	out, _, code = operatorsCLI(t, d, "list")
	require.Zero(t, code)
	require.Contains(t, out, "ana")
	require.Contains(t, out, "bo")
	require.NotContains(t, out, ana)
	out, _, code = operatorsCLI(t, d, "revoke", "bo")
	require.Zero(t, code, out)
	_, code = cli(t, g, bo, "reconcile", "list")
	require.Equal(t, 5, code, "the revoked credential")
	_, code = cli(t, g, ana, "reconcile", "list")
	require.Zero(t, code)
	_, _, code = operatorsCLI(t, d, "revoke", "bo")
	require.Equal(t, 3, code, "nothing left to revoke")
	_, errOut, code := operatorsCLI(t, d, "add", "<script>")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "operator name must be")

	require.Equal(t, map[string]int{d.Fulfilment(t, id).Key: 1}, conn.snapshot(), "the connector was called once, under the payment's key")
	m := g.scrape(t)
	require.Equal(t, 1.0, m[`guardian_connector_errors_total{action="fulfil",class="5xx"}`])
	require.Equal(t, 1.0, m[`guardian_dispatches_total{action="fulfil",outcome="unknown"}`])
	require.Equal(t, 1.0, m[`guardian_transitions_total{action="fulfil",from="needs_reconciliation",to="fulfilled"}`], "the operator's resolution is counted")
	g.stop(t)
}

// TestOperatorCLIBrowsesAndRetries: events and fulfilments found by id
// prefix, and failed fulfilments retried from the command line, once.
func TestOperatorCLIBrowsesAndRetries(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	conn := newFakeConnector(t)
	conn.reject = "pi_refused_"
	g := start(t, baseEnv(t, d, conn))
	for _, p := range []string{"pi_refused_1", "pi_refused_2", "pi_fine_1"} {
		body := []byte(`{"id":"evt_` + p + `","type":"checkout.session.completed","data":{"object":{"id":"cs_` + p + `","payment_status":"paid","payment_intent":"` + p + `"}}}`)
		require.Equal(t, http.StatusOK, g.post(t, "/webhooks/stripe", providertest.SignStripe(body, stripeSecret, time.Now()), body))
	}
	require.Eventually(t, func() bool { return stateCount(t, d, "failed") == 2 && stateCount(t, d, "fulfilled") == 1 }, 15*time.Second, 20*time.Millisecond)
	ana := addOperator(t, d, "ana")

	out, code := cli(t, g, ana, "events", "list", "--payment-prefix", "pi_refused", "--json")
	require.Zero(t, code, out)
	var events web.EventList
	require.NoError(t, json.Unmarshal([]byte(out), &events))
	require.Len(t, events.Events, 2)
	out, code = cli(t, g, ana, "events", "list", "--event-prefix", "evt_pi_fine")
	require.Zero(t, code, out)
	require.Contains(t, out, "evt_pi_fine_1")
	require.NotContains(t, out, "pi_refused")
	out, code = cli(t, g, ana, "fulfilments", "list", "--state", "failed", "--type", "checkout.session.completed", "--json")
	require.Zero(t, code, out)
	var failed web.FulfilmentList
	require.NoError(t, json.Unmarshal([]byte(out), &failed))
	require.Len(t, failed.Fulfilments, 2)

	_, code = cli(t, g, ana, "fulfilments", "retry")
	require.Equal(t, 2, code, "no ids and no --listed: a usage error, nothing retried")
	_, code = cli(t, g, ana, "fulfilments", "list", "--since", "yesterday")
	require.Equal(t, 2, code)

	conn.mu.Lock()
	conn.reject = ""
	conn.mu.Unlock()
	out, code = cli(t, g, ana, "fulfilments", "retry", "--listed", "--payment-prefix", "pi_refused_1")
	require.Zero(t, code, out)
	require.Contains(t, out, "retried")
	require.Equal(t, 1, strings.Count(out, "retried"), out)
	require.Eventually(t, func() bool { return stateCount(t, d, "fulfilled") == 2 }, 15*time.Second, 20*time.Millisecond)
	out, code = cli(t, g, ana, "fulfilments", "retry", failed.Fulfilments[0].ID, failed.Fulfilments[1].ID, "--json")
	require.Zero(t, code, out)
	var bulk web.BulkAnswer
	require.NoError(t, json.Unmarshal([]byte(out), &bulk))
	results := map[string]int{}
	for _, r := range bulk.Results {
		results[r.Result]++
	}
	require.Equal(t, map[string]int{"retried": 1, "payment_held": 1}, results, "pi_refused_1 is held by its retry; pi_refused_2 is retried now")
	require.Eventually(t, func() bool { return stateCount(t, d, "fulfilled") == 3 }, 15*time.Second, 20*time.Millisecond)
	require.Equal(t, 2, stateCount(t, d, "failed"), "the failed rows stay as the record")
	require.Equal(t, 2, d.Count(t, `SELECT count(*) FROM fulfilment_transition WHERE actor = 'operator ana' AND reason LIKE 'retry of failed fulfilment %'`))

	// No lookup is configured here: a re-check says so.
	out, code = cli(t, g, ana, "reconcile", "recheck", failed.Fulfilments[0].ID)
	require.Equal(t, 4, code, out)
	require.Contains(t, out, "no connector lookup is configured")
	g.stop(t)
}

// TestConnectorTestCLI: `guardian connector test` runs the conformance
// against a receiver built on the receiver kit (every step passes, nothing
// acted on), against a receiver that acts on every request and has no
// lookup (problems reported, exit 1), and refuses a malformed secret.
func TestConnectorTestCLI(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	ctx := t.Context()
	require.NoError(t, receiver.Migrate(ctx, d.Pool))
	kit, err := receiver.New(receiver.Config{Pool: d.Pool, Secrets: []string{connectorSecret}, Handler: func(context.Context, pgx.Tx, receiver.Delivery) error {
		t.Error("the conformance run made the merchant's handler act")
		return nil
	}})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("POST /fulfil", kit.Action())
	mux.Handle("GET /lookup/{key}", kit.Lookup())
	good := httptest.NewServer(mux)
	t.Cleanup(good.Close)

	run := func(url, secret string, args ...string) (string, int) {
		cmd := exec.Command(binary, append([]string{"connector", "test"}, args...)...)
		cmd.Env = []string{"GUARDIAN_CONNECTOR_URL=" + url + "/fulfil", "GUARDIAN_CONNECTOR_LOOKUP_URL=" + url + "/lookup/{key}",
			"GUARDIAN_CONNECTOR_SECRET=" + secret, "GUARDIAN_CONNECTOR_TIMEOUT=5s"}
		out, err := cmd.CombinedOutput()
		code := 0
		if exit, ok := err.(*exec.ExitError); ok {
			code = exit.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return string(out), code
	}
	out, code := run(good.URL, connectorSecret, "--json")
	require.Zero(t, code, out)
	var report struct {
		OK    bool `json:"ok"`
		Steps []struct {
			Provider string `json:"provider"`
			Name     string `json:"name"`
			OK       bool   `json:"ok"`
		} `json:"steps"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &report), out)
	require.True(t, report.OK)
	require.Len(t, report.Steps, 28, "every check, once for each provider served: Stripe and Standard Webhooks")
	require.Equal(t, "standard", report.Steps[0].Provider, "providers by name")
	require.Equal(t, "stripe", report.Steps[14].Provider)
	out, code = run(good.URL, connectorSecret, "--json", "--provider", "adyen")
	require.Zero(t, code, out)
	require.NoError(t, json.Unmarshal([]byte(out), &report), out)
	require.Len(t, report.Steps, 14)
	require.Equal(t, "adyen", report.Steps[13].Provider)
	out, code = run(good.URL, connectorSecret, "--provider", "mollie")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, `"mollie" is not a provider Guardian serves`)

	naive := newFakeConnector(t)
	out, code = run(naive.srv.URL, connectorSecret, "--provider", "stripe")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "PROBLEM")
	require.Contains(t, out, "ACTED TWICE")
	for key := range naive.snapshot() {
		// The one probe of the test-key guard is a test delivery under a
		// key without the prefix, which a receiver keeping the contract
		// refuses; it is no key Guardian derives for a payment.
		require.True(t, strings.HasPrefix(key, "gtest_") || strings.HasPrefix(key, "conformance_probe_"), "only test keys were sent: %s", key)
	}

	out, code = run(good.URL, "whsec_")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "connector secret is malformed", "a secret was given: say what is wrong with it")
	out, code = run(good.URL, "")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "connector secret is required")

	// With an actions file: every action's receiver, or those --action
	// names, each step saying whose it is.
	routes := filepath.Join(t.TempDir(), "routes.yaml")
	require.NoError(t, os.WriteFile(routes, []byte(`actions:
  licence:
    url: `+good.URL+`/fulfil
    lookup_url: `+good.URL+`/lookup/{key}
    secret_env: RECEIVER_SECRET
  ledger:
    url: `+naive.srv.URL+`/fulfil
    secret_env: RECEIVER_SECRET
routes:
  - actions: [licence, ledger]
`), 0o600))
	runFile := func(args ...string) (string, int) {
		cmd := exec.Command(binary, append([]string{"connector", "test", "--provider", "stripe"}, args...)...)
		cmd.Env = []string{"GUARDIAN_DEV=1", "GUARDIAN_ACTIONS_FILE=" + routes, "RECEIVER_SECRET=" + connectorSecret}
		out, err := cmd.CombinedOutput()
		if exit, ok := err.(*exec.ExitError); ok {
			return string(out), exit.ExitCode()
		}
		require.NoError(t, err)
		return string(out), 0
	}
	out, code = runFile("--action", "licence", "--json")
	require.Zero(t, code, out)
	var byAction struct {
		Steps []struct {
			Action string `json:"action"`
			OK     bool   `json:"ok"`
		} `json:"steps"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &byAction), out)
	require.Len(t, byAction.Steps, 14)
	for _, s := range byAction.Steps {
		require.Equal(t, "licence", s.Action)
	}
	out, code = runFile()
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "PROBLEM  ledger")
	require.NotContains(t, out, "PROBLEM  licence")
	out, code = runFile("--action", "crm")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, `"crm" is not one of the actions (licence, ledger)`)
}

// TestDemo runs `guardian demo` against the real binary, as a new user
// does after `just run`: every delivery answered as the demo expects, both
// payments fulfilled once, and the refund taking the Stripe one back once.
func TestDemo(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	conn := newFakeConnector(t)
	e := baseEnv(t, d, conn)
	g := start(t, e)
	cmd := exec.Command(binary, "demo", "--url", g.url)
	cmd.Env = []string{"GUARDIAN_OPERATOR_TOKEN=" + e["GUARDIAN_ADMIN_TOKEN"], "GUARDIAN_STRIPE_SECRETS=" + stripeSecret, "GUARDIAN_STANDARD_SECRETS=" + standardSecret}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "9 deliveries, 2 payments, 2 fulfilments, 2 fulfilled.")
	require.Contains(t, string(out), "2 refund events, 1 revocation: the payment was taken back once")
	revokes := 0
	conn.mu.Lock()
	for key, body := range conn.payment {
		if strings.Contains(body, `"action":"revoke"`) {
			revokes += conn.calls[key]
		}
	}
	conn.mu.Unlock()
	require.Equal(t, 1, revokes, "the receiver saw one revocation, once")
	g.stop(t)
}
