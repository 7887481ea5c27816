package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/logtest"
	"github.com/guardian-pay/guardian/db/dbtest"
	"github.com/guardian-pay/guardian/db/dbtest/redistest"
	"github.com/guardian-pay/guardian/receiver/contract"
)

const (
	stripeSecret    = "whsec_e2e_stripe_endpoint_secret_0123456789"
	standardSecret  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	paddleSecret    = "pdl_ntfset_01e2e0chaos0destination_secretforguardian"
	shopifySecret   = "shopify_e2e_client_secret_0123456789abcdef"
	lemonSecret     = "lemonsqueezy_e2e_signing_secret_01"
	adyenKey        = "9C2F5E7A1B3D4F6081A2B3C4D5E6F708192A3B4C5D6E7F8091A2B3C4D5E6F7A8"
	connectorSecret = "whsec_Y29ubmVjdG9yIHNlY3JldCBmb3IgZTJl"
	adminToken      = "e2e-admin-token-0123456789"
)

var binary string

func TestMain(m *testing.M) {
	if addr := os.Getenv(ledgerConnectorEnv); addr != "" {
		os.Exit(runLedgerConnector(addr)) // this process is the chaos suite's connector
	}
	dir, err := os.MkdirTemp("", "guardian-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "guardian")
	build := exec.Command("go", "build", "-o", binary, "..")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build guardian:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// fakeConnector is the receiver of fulfilments: it verifies each request's
// signature and counts calls per Idempotency-Key.
type fakeConnector struct {
	srv *httptest.Server
	// hold, when set, makes calls whose payment it names hang until the
	// client goes away.
	hold string
	// fail, when set, makes calls whose payment it names answer 500.
	fail string
	// reject, when set, makes calls whose body holds it answer 422 with
	// a signed decline. Set and cleared under mu.
	reject string
	// deny, when set, makes calls whose body holds it answer 401, as a
	// receiver with a rotated secret does: not delivered.
	deny string

	mu      sync.Mutex
	calls   map[string]int // by Idempotency-Key
	payment map[string]string
	entered chan string
}

func newFakeConnector(t *testing.T) *fakeConnector {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(connectorSecret)
	require.NoError(t, err)
	c := &fakeConnector{calls: map[string]int{}, payment: map[string]string{}, entered: make(chan string, 100)}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := wh.Verify(body, r.Header); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		key := r.Header.Get("Idempotency-Key")
		c.mu.Lock()
		c.calls[key]++
		c.payment[key] = string(body)
		hold := c.hold != "" && bytes.Contains(body, []byte(c.hold))
		reject := c.reject != "" && bytes.Contains(body, []byte(c.reject))
		c.mu.Unlock()
		c.entered <- key
		if hold {
			<-r.Context().Done()
			return
		}
		if reject {
			// A decline is the receiver's signed word (docs/receivers.md):
			// an unsigned 422 would only park the payment.
			_ = contract.WriteStatement(w, connectorSecret, http.StatusUnprocessableEntity,
				contract.Statement{IdempotencyKey: key, Status: contract.StatusDeclined, Reason: "card_declined"}, time.Now())
			return
		}
		if c.deny != "" && bytes.Contains(body, []byte(c.deny)) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		if c.fail != "" && bytes.Contains(body, []byte(c.fail)) {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *fakeConnector) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.calls {
		out[k] = v
	}
	return out
}

// guardian is one running guardian process.
type guardian struct {
	cmd *exec.Cmd
	url string
	// metricsURL is the operations listener (GUARDIAN_METRICS_ADDR).
	metricsURL string
	stderr     *logtest.Buffer
	done       chan error
}

// logs returns what the process has logged so far.
func (g *guardian) logs() string { return g.stderr.String() }

type env map[string]string

// baseEnv is a complete production configuration for one test.
func baseEnv(t *testing.T, d *dbtest.DB, conn *fakeConnector) env {
	t.Helper()
	_, prefix := redistest.Client(t)
	return env{
		"DATABASE_URL":               d.URL,
		"REDIS_URL":                  redistest.URL(t),
		"GUARDIAN_REDIS_PREFIX":      prefix,
		"GUARDIAN_STRIPE_SECRETS":    "whsec_old_rotated_out_0123456789abcdef," + stripeSecret,
		"GUARDIAN_STANDARD_SECRETS":  standardSecret,
		"GUARDIAN_CONNECTOR_URL":     conn.srv.URL,
		"GUARDIAN_CONNECTOR_SECRET":  connectorSecret,
		"GUARDIAN_CONNECTOR_TIMEOUT": "5s",
		"GUARDIAN_LOG_LEVEL":         "debug",
		"GUARDIAN_ADMIN_TOKEN":       adminToken,
		"GUARDIAN_METRICS_REFRESH":   "100ms",
	}
}

// freeAddr is a loopback address for a process the test starts, never one
// it has given before (dbtest.FreePort): a port is free once its probe
// closes, so the kernel may offer it again to the next probe, and a
// process's metrics listener would then collide with its own public one.
func freeAddr(t *testing.T) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(dbtest.FreePort(t))
}

// start runs guardian serve with e and waits until /readyz answers 200.
func start(t *testing.T, e env) *guardian {
	t.Helper()
	return startAt(t, freeAddr(t), e)
}

// startAt is start on a given address, so a restarted process answers where
// its predecessor did.
func startAt(t *testing.T, addr string, e env) *guardian {
	t.Helper()
	cmd := exec.Command(binary, "serve")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "GUARDIAN_ADDR=" + addr}
	metricsAddr, ok := e["GUARDIAN_METRICS_ADDR"]
	if !ok {
		metricsAddr = freeAddr(t)
		cmd.Env = append(cmd.Env, "GUARDIAN_METRICS_ADDR="+metricsAddr)
	}
	for k, v := range e {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	g := &guardian{cmd: cmd, url: "http://" + addr, metricsURL: "http://" + metricsAddr, stderr: &logtest.Buffer{}, done: make(chan error, 1)}
	cmd.Stderr = g.stderr
	require.NoError(t, cmd.Start())
	go func() { g.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-g.done
		}
		if t.Failed() {
			t.Logf("guardian stderr:\n%s", g.logs())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(g.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return g
			}
		}
		select {
		case err := <-g.done:
			t.Fatalf("guardian exited before ready: %v\n%s", err, g.logs())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("guardian not ready after 30s\n%s", g.logs())
		}
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (g *guardian) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, g.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-g.done:
		require.NoError(t, err, "guardian exits 0 on SIGTERM")
	case <-time.After(30 * time.Second):
		t.Fatal("guardian did not stop within 30s of SIGTERM")
	}
}

// kill sends SIGKILL: a crash, with no chance to record anything.
func (g *guardian) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, g.cmd.Process.Kill())
	<-g.done
}

func (g *guardian) post(t *testing.T, path string, header http.Header, body []byte) int {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, g.url+path, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header = header.Clone()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func stateCount(t *testing.T, d *dbtest.DB, state string) int {
	t.Helper()
	return d.Count(t, `SELECT count(*) FROM fulfilment WHERE state = $1`, state)
}

// scrape reads /metrics from the operations listener into series -> value,
// keyed as Prometheus prints them (name{label="v",...}).
func (g *guardian) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := http.Get(g.metricsURL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		var v float64
		_, err := fmt.Sscan(line[i+1:], &v)
		require.NoError(t, err, line)
		out[line[:i]] = v
	}
	return out
}

// execSelf runs this test binary again with env, running no tests: TestMain
// sees the env and becomes a helper process.
func execSelf(env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd
}

// waitGauge waits until a gauge read from the table (refreshed on a timer,
// never per scrape) shows want.
func (g *guardian) waitGauge(t *testing.T, series string, want float64) {
	t.Helper()
	require.Eventually(t, func() bool { return g.scrape(t)[series] == want }, 10*time.Second, 50*time.Millisecond, "%s never became %v", series, want)
}
