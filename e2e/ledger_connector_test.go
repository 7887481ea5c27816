package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/connector"
)

// The chaos suite's connector runs as its own process (this test binary,
// re-executed), so faults aimed at Guardian never touch it. It writes every
// call to an append-only ledger and fsyncs before it answers: the ledger is
// the ground truth of what was done.

const (
	ledgerConnectorEnv = "GUARDIAN_CHAOS_CONNECTOR_ADDR"
	ledgerFileEnv      = "GUARDIAN_CHAOS_LEDGER"
	ledgerModeEnv      = "GUARDIAN_CHAOS_MODE"
)

// ledgerEntry is one line of the ledger.
type ledgerEntry struct {
	Key     string `json:"key"`
	Payment string `json:"payment"`
	Attempt string `json:"attempt"`
	// Acted is true when the connector performed the action on this call.
	Acted  bool   `json:"acted"`
	Answer string `json:"answer"`
}

// runLedgerConnector serves until killed. Modes: "normal" acts and answers
// 200; "ambiguous" acts on every call but answers 200, 500, resets the
// connection, or answers late (past Guardian's timeout), at random;
// "hostile" is ambiguous behind a flaky edge, as real receivers are: some
// calls never reach it (an ingress's bare 404, a 401 from a drifted clock),
// some are declined without acting (422, out of stock for now: the
// operators retry them), and some lookups get the ingress's 404 instead of
// an answer.
// GET /lookup/{key} answers from the ledger with a lookup answer signed
// with the connector secret: "done" if any call for the key acted, else
// "not_done".
func runLedgerConnector(addr string) int {
	f, err := os.OpenFile(os.Getenv(ledgerFileEnv), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mode := os.Getenv(ledgerModeEnv)
	wh, err := standardwebhooks.NewWebhook(connectorSecret)
	if err != nil {
		return 1
	}
	var mu sync.Mutex
	acted := map[string]bool{}
	write := func(e ledgerEntry) {
		b, _ := json.Marshal(e)
		mu.Lock()
		defer mu.Unlock()
		_, _ = f.Write(append(b, '\n'))
		_ = f.Sync()
		if e.Acted {
			acted[e.Key] = true
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /lookup/{key}", func(w http.ResponseWriter, r *http.Request) {
		if mode == "hostile" && rand.Float64() < 0.2 {
			http.NotFound(w, r) // the ingress, not the receiver
			return
		}
		key := r.PathValue("key")
		mu.Lock()
		done := acted[key]
		mu.Unlock()
		status := connector.LookupNotDone
		if done {
			status = connector.LookupDone
		}
		body, h, err := connector.SignLookupAnswer(connectorSecret, key, status, time.Now())
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		for k, v := range h {
			w.Header()[k] = v
		}
		_, _ = w.Write(body)
	})
	mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if wh.Verify(body, r.Header) != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var req struct {
			PaymentID string `json:"payment_id"`
		}
		_ = json.Unmarshal(body, &req)
		e := ledgerEntry{Key: r.Header.Get("Idempotency-Key"), Payment: req.PaymentID, Attempt: r.Header.Get("Guardian-Attempt"), Acted: true, Answer: "200"}
		roll := rand.Float64()
		// The edge refuses a key's first call only: a transient misroute or
		// clock drift, as a rotated route or a resynced clock would end it
		// (River's backoff after a third refusal would outlast the test).
		if mode == "hostile" && e.Attempt == "1" {
			switch {
			case roll < 0.08: // the ingress lost the route: nothing reached the receiver
				e.Acted, e.Answer = false, "404"
				write(e)
				http.NotFound(w, r)
				return
			case roll < 0.12: // the receiver's clock drifted: refused before acting
				e.Acted, e.Answer = false, "401"
				write(e)
				http.Error(w, "stale signature", http.StatusUnauthorized)
				return
			case roll < 0.15: // the receiver declines, doing nothing: out of stock for now
				e.Acted, e.Answer = false, "422"
				write(e)
				http.Error(w, "out_of_stock", http.StatusUnprocessableEntity)
				return
			}
			roll = (roll - 0.15) / 0.85
		}
		if mode == "ambiguous" || mode == "hostile" {
			switch {
			case roll < 0.15:
				e.Answer = "500"
			case roll < 0.25:
				e.Answer = "reset"
			case roll < 0.30:
				e.Answer = "late"
			}
		}
		write(e) // durable before any answer
		switch e.Answer {
		case "500":
			w.WriteHeader(http.StatusInternalServerError)
		case "reset":
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				_ = conn.(*net.TCPConn).SetLinger(0)
				_ = conn.Close()
			}
		case "late":
			time.Sleep(1500 * time.Millisecond) // past Guardian's connector timeout in the suite
			w.WriteHeader(http.StatusOK)
		default:
			w.WriteHeader(http.StatusOK)
		}
	})
	// The process picks its own port and says which: a port chosen by the
	// test and closed again could be taken by another scenario's
	// connector first, and this scenario's calls would land in that
	// scenario's ledger.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := os.WriteFile(os.Getenv(ledgerFileEnv)+".addr", []byte(ln.Addr().String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := &http.Server{Handler: mux}
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// ledgerConnector is the test's handle on the connector process.
type ledgerConnector struct {
	url    string
	ledger string
}

func startLedgerConnector(t *testing.T, mode string) *ledgerConnector {
	t.Helper()
	c := &ledgerConnector{ledger: t.TempDir() + "/ledger.jsonl"}
	cmd := execSelf(ledgerConnectorEnv+"=127.0.0.1:0", ledgerFileEnv+"="+c.ledger, ledgerModeEnv+"="+mode)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.Eventually(t, func() bool {
		addr, err := os.ReadFile(c.ledger + ".addr")
		if err != nil || len(addr) == 0 {
			return false
		}
		c.url = "http://" + string(addr)
		return true
	}, 10*time.Second, 10*time.Millisecond, "the connector process never said where it listens")
	require.Eventually(t, func() bool {
		resp, err := http.Get(c.url + "/lookup/probe")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	}, 10*time.Second, 10*time.Millisecond)
	return c
}

// entries reads the ledger.
func (c *ledgerConnector) entries(t *testing.T) []ledgerEntry {
	t.Helper()
	f, err := os.Open(c.ledger)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	defer f.Close()
	var out []ledgerEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var e ledgerEntry
		require.NoError(t, json.Unmarshal([]byte(line), &e))
		out = append(out, e)
	}
	return out
}
