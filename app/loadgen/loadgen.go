// Package loadgen is Guardian's one load tool: every request a
// measurement sends comes from here. Main is `guardian bench`: correctly
// signed Stripe deliveries, a share of them duplicates, sent to a running
// Guardian, with throughput, latency and end-to-end fulfilment read from
// its metrics. Flood sends forged deliveries (ForgedDeliveries), to price
// a refusal. `just bench` (e2e/bench) is the harness around it: it starts
// Guardian, runs these against it and against the baselines (pgbench,
// redis-benchmark, bare River) in the same run, and reports the ratios;
// it sends nothing itself.
package loadgen

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/app/settings"
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

// metricsURL is where a run reads /metrics, to count fulfilments.
var metricsURL = settings.String(settings.Setting{
	Name: "GUARDIAN_METRICS_URL", Default: "`http://127.0.0.1:9090`", Client: true,
	Doc: "the operations listener `guardian bench` reads `/metrics` from, to count fulfilments",
}, "http://127.0.0.1:9090")

// ReadTarget is the Guardian at url a run loads, signing with secret, its
// operations listener read from env.
func ReadTarget(env *settings.Env, url, secret string) Target {
	return Target{URL: url, MetricsURL: metricsURL.Read(env), Secret: secret}
}

// Target is the Guardian a run loads, as the settings name it: the flags
// default to it.
type Target struct {
	// URL is Guardian's base URL; MetricsURL its operations listener.
	URL, MetricsURL string
	// Secret is the Stripe signing secret the deliveries are signed with.
	Secret string
}

// Main runs `guardian bench` with args: it sends correctly signed Stripe
// deliveries to the target Guardian and prints what it measured. It
// returns the process exit code: 0, or 2 for bad flags.
func Main(ctx context.Context, args []string, target Target, stdout, stderr io.Writer) int {
	o, code := parseOptions(args, target, stderr)
	if code >= 0 {
		return code
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.concurrency * 2, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}, Timeout: 30 * time.Second}
	startFulfilled, _ := ScrapeFulfilled(ctx, client, o.metricsURL)
	start := time.Now()
	res := o.send(ctx, client)
	if o.wait > 0 {
		o.waitFulfilled(client, startFulfilled, start, &res)
	}
	if o.json {
		_ = json.NewEncoder(stdout).Encode(res)
		return exitOK
	}
	o.print(stdout, res)
	return exitOK
}

// options are a run's flags, parsed.
type options struct {
	base, metricsURL, secret, run string
	concurrency                   int
	duration, wait                time.Duration
	dupShare, fulfilShare, rate   float64
	json                          bool
	seed, maxNew                  int64
	// actions is how many fulfilments each new fulfilling event makes:
	// the actions its purchase pays for.
	actions int
}

// parseOptions reads the flags; code is the exit code when the run ends
// here (help, a bad flag), -1 when it goes on.
func parseOptions(args []string, target Target, stderr io.Writer) (o options, code int) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.base, "url", target.URL, "Guardian's base URL")
	fs.StringVar(&o.metricsURL, "metrics-url", target.MetricsURL, "Guardian's operations listener, where /metrics is served (to count fulfilments)")
	fs.IntVar(&o.concurrency, "concurrency", 32, "requests in flight")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "how long to send")
	fs.Float64Var(&o.dupShare, "duplicates", 0.3, "share of deliveries that repeat an event already sent (0-1)")
	fs.Float64Var(&o.fulfilShare, "fulfilling", 1.0, "share of new events whose type fulfils a payment (0-1)")
	fs.Float64Var(&o.rate, "rate", 0, "deliveries per second to aim at (0: as fast as answers come)")
	fs.DurationVar(&o.wait, "wait-fulfil", 60*time.Second, "how long to wait for fulfilments to finish (0: do not measure)")
	fs.BoolVar(&o.json, "json", false, "print the result as JSON")
	fs.StringVar(&o.run, "prefix", "", "the run's name, from which its event ids derive (default: random per run)")
	fs.Int64Var(&o.seed, "seed", 0, "events already sent under --prefix, which duplicates may repeat")
	fs.Int64Var(&o.maxNew, "max", 0, "stop after this many new events (0: no limit)")
	fs.IntVar(&o.actions, "actions", 1, "fulfilments each new fulfilling event makes: the actions its purchase pays for (an actions file's routes)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, exitOK
		}
		return o, exitUsage
	}
	if o.concurrency < 1 || o.actions < 1 || o.dupShare < 0 || o.dupShare > 1 || o.fulfilShare < 0 || o.fulfilShare > 1 {
		fmt.Fprintln(stderr, "guardian bench: concurrency and actions ≥ 1, shares between 0 and 1")
		return o, exitUsage
	}
	o.secret = target.Secret
	if o.run == "" {
		o.run = strings.ToLower(rand.Text()[:8])
	}
	return o, -1
}

// tally is what the senders saw, gathered.
type tally struct {
	mu        sync.Mutex
	latencies []time.Duration
	statuses  map[string]int
	errs      int
	newFulfil atomic.Int64
}

// send runs the senders for the run's duration and returns what they saw.
func (o options) send(ctx context.Context, client *http.Client) Result {
	target := strings.TrimRight(o.base, "/") + "/webhooks/stripe"
	var seq atomic.Int64 // events sent under this prefix so far
	seq.Store(o.seed)
	t := &tally{statuses: map[string]int{}}
	ctx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	var tick <-chan time.Time
	if o.rate > 0 {
		tk := time.NewTicker(time.Duration(float64(time.Second) / o.rate))
		defer tk.Stop()
		tick = tk.C
	}
	start := time.Now()
	var wg sync.WaitGroup
	for w := range o.concurrency {
		wg.Go(func() { o.sender(ctx, client, target, uint64(w), tick, &seq, t) })
	}
	wg.Wait()
	elapsed := time.Since(start)

	res := Result{Deliveries: len(t.latencies), Seconds: elapsed.Seconds(), Statuses: t.statuses, Errors: t.errs, NewFulfilling: int(t.newFulfil.Load())}
	res.PerSecond = float64(res.Deliveries) / elapsed.Seconds()
	slices.Sort(t.latencies)
	pct := func(p float64) float64 {
		if len(t.latencies) == 0 {
			return 0
		}
		return float64(t.latencies[min(len(t.latencies)-1, int(p*float64(len(t.latencies))))].Microseconds()) / 1000
	}
	res.P50ms, res.P95ms, res.P99ms = pct(.50), pct(.95), pct(.99)
	return res
}

// sender is one sender: new events and repeats of sent ones, until ctx
// ends or the run's new events are all sent.
func (o options) sender(ctx context.Context, client *http.Client, target string, w uint64, tick <-chan time.Time, seq *atomic.Int64, t *tally) {
	rng := mathrand.New(mathrand.NewPCG(w+1, uint64(time.Now().UnixNano())))
	var local []time.Duration
	localStatus := map[string]int{}
	localErr := 0
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
		if n > 0 && rng.Float64() < o.dupShare {
			id = rng.Int64N(n) + 1 // an event already sent (or being sent)
		} else {
			id = seq.Add(1)
			if o.maxNew > 0 && id > o.seed+o.maxNew {
				break
			}
		}
		fulfils := float64(id%1000)/1000 < o.fulfilShare
		body := benchEvent(o.run, id, fulfils)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
		if err != nil {
			continue
		}
		req.Header = providertest.SignStripe(body, o.secret, time.Now())
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
			t.newFulfil.Add(1)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.latencies = append(t.latencies, local...)
	for k, v := range localStatus {
		t.statuses[k] += v
	}
	t.errs += localErr
}

// waitFulfilled waits, up to the run's wait, until Guardian's metrics count
// the run's new fulfilling events fulfilled (each of their actions), and
// records how fast.
func (o options) waitFulfilled(client *http.Client, startFulfilled float64, start time.Time, res *Result) {
	bg := context.Background()
	deadline := time.Now().Add(o.wait)
	last, lastAt := startFulfilled, start
	for time.Now().Before(deadline) {
		cur, err := ScrapeFulfilled(bg, client, o.metricsURL)
		if err != nil {
			break
		}
		if cur > last {
			last, lastAt = cur, time.Now()
		}
		if cur-startFulfilled >= float64(res.NewFulfilling*o.actions) {
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

// print writes the result for a person.
func (o options) print(stdout io.Writer, res Result) {
	fmt.Fprintf(stdout, "deliveries   %d in %.1fs: %.0f/s (concurrency %d, %.0f%% duplicates, %.0f%% fulfilling)\n",
		res.Deliveries, res.Seconds, res.PerSecond, o.concurrency, o.dupShare*100, o.fulfilShare*100)
	fmt.Fprintf(stdout, "latency      p50 %.2f ms  p95 %.2f ms  p99 %.2f ms\n", res.P50ms, res.P95ms, res.P99ms)
	keys := slices.Sorted(maps.Keys(res.Statuses))
	for _, k := range keys {
		fmt.Fprintf(stdout, "status       %-20s %d\n", k, res.Statuses[k])
	}
	if res.Errors > 0 {
		fmt.Fprintf(stdout, "errors       %d transport errors\n", res.Errors)
	}
	if o.wait > 0 {
		fmt.Fprintf(stdout, "fulfilled    %.0f of %d new fulfilling events in %.1fs: %.0f/s end to end\n", res.Fulfilled, res.NewFulfilling, res.FulfilSeconds, res.FulfilPerSecond)
	}
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
