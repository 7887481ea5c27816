package e2e

import (
	"bufio"
	"crypto/sha256"
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

	"github.com/guardian-pay/guardian/receiver/contract"
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
	// Action is "revoke" for a call taking the payment back; "" fulfils.
	Action string `json:"action,omitempty"`
	// Acted is true when the connector performed the action on this call.
	Acted  bool   `json:"acted"`
	Answer string `json:"answer"`
	// Received is when the call arrived, before anything was done for it.
	Received time.Time `json:"received"`
}

// runLedgerConnector serves until killed. Modes: "normal" acts and answers
// 200; "ambiguous" acts on every call but answers 200, 500, resets the
// connection, or answers late (past Guardian's timeout), at random;
// "hostile" is ambiguous behind a flaky edge, as real receivers are: some
// calls never reach it (an ingress's bare 404, a 401 from a drifted clock),
// some are declined without acting (422, out of stock for now: the
// operators retry them), and some lookups get the ingress's 404 instead of
// an answer.
// "idempotent" is an idempotency layer as the IETF Idempotency-Key draft
// and docs/receivers.md describe it, in front of a slow and faulty action:
// a key in progress answers 409, a finished key replays its stored answer,
// another body under a finished key is refused (422), a declined key stays
// declined; one first call in ten acts slower than Guardian's timeout and
// reconcile grace, some answers are lost after the act, some handlers fail
// without acting, and a few payments are declined.
// GET /lookup/{key} answers with a statement signed with the connector
// secret: "done" if any call for the key acted, else "not_done"; in
// "idempotent" mode, the key's state (in progress, done, declined, not
// done).
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
	keys := map[string]*keyState{} // idempotent mode, under mu
	mux := http.NewServeMux()
	mux.HandleFunc("GET /lookup/{key}", func(w http.ResponseWriter, r *http.Request) {
		if mode == "idempotent" {
			key := r.PathValue("key")
			mu.Lock()
			status := contract.StatusNotDone
			if k := keys[key]; k != nil {
				status = k.status
			}
			mu.Unlock()
			_ = contract.WriteStatement(w, connectorSecret, http.StatusOK, contract.Statement{IdempotencyKey: key, Status: status}, time.Now())
			return
		}
		if mode == "hostile" && rand.Float64() < 0.2 {
			http.NotFound(w, r) // the ingress, not the receiver
			return
		}
		key := r.PathValue("key")
		mu.Lock()
		done := acted[key]
		mu.Unlock()
		status := contract.StatusNotDone
		if done {
			status = contract.StatusDone
		}
		_ = contract.WriteStatement(w, connectorSecret, http.StatusOK, contract.Statement{IdempotencyKey: key, Status: status}, time.Now())
	})
	mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		received := time.Now()
		body, _ := io.ReadAll(r.Body)
		if wh.Verify(body, r.Header) != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var req struct {
			PaymentID string `json:"payment_id"`
			Action    string `json:"action"`
		}
		_ = json.Unmarshal(body, &req)
		e := ledgerEntry{Key: r.Header.Get("Idempotency-Key"), Payment: req.PaymentID, Action: req.Action, Attempt: r.Header.Get("Guardian-Attempt"), Acted: true, Answer: "200", Received: received}
		if mode == "idempotent" {
			serveIdempotent(w, r, body, e, &mu, keys, write)
			return
		}
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

// keyState is what the idempotency layer keeps per key.
type keyState struct {
	status string // contract.StatusInProgress, StatusDone or StatusDeclined
	hash   [32]byte
	code   int // the stored answer's status
}

// serveIdempotent answers one action request as an idempotency layer in
// front of a slow, faulty action (runLedgerConnector's "idempotent" mode).
func serveIdempotent(w http.ResponseWriter, r *http.Request, body []byte, e ledgerEntry, mu *sync.Mutex, keys map[string]*keyState, write func(ledgerEntry)) {
	state := func(code int, status string) {
		_ = contract.WriteStatement(w, connectorSecret, code, contract.Statement{IdempotencyKey: e.Key, Status: status}, time.Now())
	}
	hash := sha256.Sum256(body)
	mu.Lock()
	k := keys[e.Key]
	if k != nil {
		mu.Unlock()
		e.Acted = false
		switch {
		case k.status == contract.StatusInProgress:
			e.Answer = "409"
			write(e)
			state(http.StatusConflict, contract.StatusInProgress)
		case k.hash != hash:
			e.Answer = "422-mismatch"
			write(e)
			state(http.StatusUnprocessableEntity, contract.StatusMismatch)
		default:
			e.Answer = "replay"
			write(e)
			state(k.code, k.status)
		}
		return
	}
	k = &keyState{status: contract.StatusInProgress, hash: hash}
	keys[e.Key] = k
	mu.Unlock()
	finish := func(status string, code int) {
		mu.Lock()
		k.status, k.code = status, code
		mu.Unlock()
	}
	switch roll := rand.Float64(); {
	case roll < 0.03: // declined: nothing done, for good
		e.Acted, e.Answer = false, "declined"
		write(e)
		finish(contract.StatusDeclined, http.StatusUnprocessableEntity)
		state(http.StatusUnprocessableEntity, contract.StatusDeclined)
		return
	case roll < 0.08: // the handler failed: nothing done, the key is free again
		e.Acted, e.Answer = false, "500-nothing-done"
		write(e)
		mu.Lock()
		delete(keys, e.Key)
		mu.Unlock()
		w.WriteHeader(http.StatusInternalServerError)
		return
	case roll < 0.18: // slower than Guardian's timeout (500 ms) and grace (2 s)
		time.Sleep(2500 * time.Millisecond)
		e.Answer = "200-slow"
	case roll < 0.26: // acts, then the answer is lost
		e.Answer = "reset"
	}
	write(e) // durable before the key is done and before any answer
	finish(contract.StatusDone, http.StatusOK)
	if e.Answer == "reset" {
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			_ = conn.(*net.TCPConn).SetLinger(0)
			_ = conn.Close()
		}
		return
	}
	state(http.StatusOK, contract.StatusDone)
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
