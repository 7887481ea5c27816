// Package loadgen is the load generator behind `guardian bench`: it sends
// correctly signed Stripe deliveries, a share of them duplicates, to a
// running Guardian and reports throughput, latency and end-to-end
// fulfilment read from Guardian's metrics.
package loadgen

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/guardian-pay/guardian/app/provider"
)

// Exit codes, as the rest of the CLI uses them.
const (
	exitOK    = 0
	exitUsage = 2
)

// Result is what one run measured.
type Result struct {
	Deliveries    int            `json:"deliveries"`
	Seconds       float64        `json:"seconds"`
	PerSecond     float64        `json:"deliveries_per_second"`
	P50ms         float64        `json:"p50_ms"`
	P95ms         float64        `json:"p95_ms"`
	P99ms         float64        `json:"p99_ms"`
	Statuses      map[string]int `json:"statuses"`
	Errors        int            `json:"transport_errors"`
	NewFulfilling int            `json:"new_fulfilling_events"`
	// Fulfilled and FulfilPerSecond come from Guardian's /metrics: fulfilments
	// completed from the first delivery until they stopped growing.
	Fulfilled       float64 `json:"fulfilled"`
	FulfilPerSecond float64 `json:"fulfilments_per_second"`
	FulfilSeconds   float64 `json:"fulfil_seconds"`
}

// Main runs `guardian bench` with args: it sends correctly signed Stripe
// deliveries to a running Guardian (GUARDIAN_URL, else defaultURL; signed with the first of
// GUARDIAN_STRIPE_SECRETS or the development secret) and prints what it
// measured. It returns the process exit code: 0, or 2 for bad flags.
func Main(ctx context.Context, args []string, defaultURL, defaultMetricsURL string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("url", cmp.Or(getenv("GUARDIAN_URL"), defaultURL), "Guardian's base URL")
	metricsURL := fs.String("metrics-url", cmp.Or(getenv("GUARDIAN_METRICS_URL"), defaultMetricsURL), "Guardian's operations listener, where /metrics is served (to count fulfilments)")
	concurrency := fs.Int("concurrency", 32, "requests in flight")
	duration := fs.Duration("duration", 10*time.Second, "how long to send")
	dupShare := fs.Float64("duplicates", 0.3, "share of deliveries that repeat an event already sent (0-1)")
	fulfilShare := fs.Float64("fulfilling", 1.0, "share of new events whose type fulfils a payment (0-1)")
	rate := fs.Float64("rate", 0, "deliveries per second to aim at (0: as fast as answers come)")
	wait := fs.Duration("wait-fulfil", 60*time.Second, "how long to wait for fulfilments to finish (0: do not measure)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	prefix := fs.String("prefix", "", "the run's name, from which its event ids derive (default: random per run)")
	seed := fs.Int64("seed", 0, "events already sent under --prefix, which duplicates may repeat")
	maxNew := fs.Int64("max", 0, "stop after this many new events (0: no limit)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if *concurrency < 1 || *dupShare < 0 || *dupShare > 1 || *fulfilShare < 0 || *fulfilShare > 1 {
		fmt.Fprintln(stderr, "guardian bench: concurrency ≥ 1, shares between 0 and 1")
		return exitUsage
	}
	secret, _, _ := strings.Cut(cmp.Or(strings.TrimSpace(getenv("GUARDIAN_STRIPE_SECRETS")), provider.DevStripeSecret), ",")
	run := *prefix
	if run == "" {
		run = strings.ToLower(rand.Text()[:8])
	}
	target := strings.TrimRight(*base, "/") + "/webhooks/stripe"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *concurrency * 2, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}, Timeout: 30 * time.Second}

	startFulfilled, _ := ScrapeFulfilled(ctx, client, *metricsURL)

	var (
		seq       atomic.Int64 // events sent under this prefix so far
		newFulfil atomic.Int64
		mu        sync.Mutex
		latencies []time.Duration
		statuses  = map[string]int{}
		errs      int
	)
	seq.Store(*seed)
	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	var tick <-chan time.Time
	if *rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / *rate))
		defer t.Stop()
		tick = t.C
	}
	start := time.Now()
	var wg sync.WaitGroup
	for w := range *concurrency {
		wg.Go(func() {
			rng := mathrand.New(mathrand.NewPCG(uint64(w)+1, uint64(time.Now().UnixNano())))
			var local []time.Duration
			localStatus := map[string]int{}
			localErr := 0
		send:
			for ctx.Err() == nil {
				if tick != nil {
					select {
					case <-tick:
					case <-ctx.Done():
						continue
					}
				}
				n := seq.Load()
				var id int64
				if n > 0 && rng.Float64() < *dupShare {
					id = rng.Int64N(n) + 1 // an event already sent (or being sent)
				} else {
					id = seq.Add(1)
					if *maxNew > 0 && id > *seed+*maxNew {
						break send
					}
				}
				fulfils := float64(id%1000)/1000 < *fulfilShare
				body := benchEvent(run, id, fulfils)
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
				if err != nil {
					continue
				}
				req.Header = provider.SignStripe(body, secret, time.Now())
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						localErr++
					}
					continue
				}
				var answer struct {
					Status string `json:"status"`
				}
				_ = json.NewDecoder(resp.Body).Decode(&answer)
				resp.Body.Close()
				local = append(local, time.Since(t0))
				key := fmt.Sprint(resp.StatusCode)
				if answer.Status != "" {
					key += " " + answer.Status
				}
				localStatus[key]++
				if answer.Status == "accepted" && fulfils {
					newFulfil.Add(1)
				}
			}
			mu.Lock()
			latencies = append(latencies, local...)
			for k, v := range localStatus {
				statuses[k] += v
			}
			errs += localErr
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	res := Result{Deliveries: len(latencies), Seconds: elapsed.Seconds(), Statuses: statuses, Errors: errs, NewFulfilling: int(newFulfil.Load())}
	res.PerSecond = float64(res.Deliveries) / elapsed.Seconds()
	slices.Sort(latencies)
	pct := func(p float64) float64 {
		if len(latencies) == 0 {
			return 0
		}
		return float64(latencies[min(len(latencies)-1, int(p*float64(len(latencies))))].Microseconds()) / 1000
	}
	res.P50ms, res.P95ms, res.P99ms = pct(.50), pct(.95), pct(.99)

	if *wait > 0 {
		bg := context.Background()
		deadline := time.Now().Add(*wait)
		last, lastAt := startFulfilled, start
		for time.Now().Before(deadline) {
			cur, err := ScrapeFulfilled(bg, client, *metricsURL)
			if err != nil {
				break
			}
			if cur > last {
				last, lastAt = cur, time.Now()
			}
			if cur-startFulfilled >= float64(res.NewFulfilling) {
				break
			}
			time.Sleep(50 * time.Millisecond) // polling a remote counter
		}
		res.Fulfilled = last - startFulfilled
		res.FulfilSeconds = lastAt.Sub(start).Seconds()
		if res.FulfilSeconds > 0 {
			res.FulfilPerSecond = res.Fulfilled / res.FulfilSeconds
		}
	}

	if *asJSON {
		_ = json.NewEncoder(stdout).Encode(res)
		return exitOK
	}
	fmt.Fprintf(stdout, "deliveries   %d in %.1fs: %.0f/s (concurrency %d, %.0f%% duplicates, %.0f%% fulfilling)\n",
		res.Deliveries, res.Seconds, res.PerSecond, *concurrency, *dupShare*100, *fulfilShare*100)
	fmt.Fprintf(stdout, "latency      p50 %.2f ms  p95 %.2f ms  p99 %.2f ms\n", res.P50ms, res.P95ms, res.P99ms)
	keys := make([]string, 0, len(statuses))
	for k := range statuses {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(stdout, "status       %-20s %d\n", k, statuses[k])
	}
	if errs > 0 {
		fmt.Fprintf(stdout, "errors       %d transport errors\n", errs)
	}
	if *wait > 0 {
		fmt.Fprintf(stdout, "fulfilled    %.0f of %d new fulfilling events in %.1fs: %.0f/s end to end\n", res.Fulfilled, res.NewFulfilling, res.FulfilSeconds, res.FulfilPerSecond)
	}
	return exitOK
}

// benchEvent is the id-th event of a run. Its ids look like a provider's:
// a type prefix and 24 characters no one can predict from the last, so a
// large database takes them at random leaves of its indexes as it takes
// real ones (Stripe's ids are random). The same run and id give the same
// ids, so a duplicate repeats its event exactly.
func benchEvent(run string, id int64, fulfils bool) []byte {
	if fulfils {
		return fmt.Appendf(nil, `{"id":"%s","object":"event","type":"checkout.session.completed","data":{"object":{"id":"%s","object":"checkout.session","mode":"payment","payment_status":"paid","payment_intent":"%s","amount_total":4200,"currency":"eur"}}}`,
			benchID("evt", run, id), benchID("cs", run, id), benchID("pi", run, id))
	}
	return fmt.Appendf(nil, `{"id":"%s","object":"event","type":"customer.updated","data":{"object":{"id":"%s","object":"customer"}}}`,
		benchID("evt", run, id), benchID("cus", run, id))
}

// benchID is kind_ and 24 hex characters of a hash of the run and id.
func benchID(kind, run string, id int64) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%s/%d", kind, run, id))
	return kind + "_" + hex.EncodeToString(sum[:12])
}

// ScrapeFulfilled reads guardian_transitions_total{to="fulfilled"} summed
// over its series from /metrics.
func ScrapeFulfilled(ctx context.Context, client *http.Client, base string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	total := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "guardian_transitions_total{") && strings.Contains(line, `to="fulfilled"`) {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
				total += v
			}
		}
	}
	return total, nil
}
