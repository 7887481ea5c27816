package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/loadgen"
)

// The floor is what a payment must cost Postgres on Guardian's path: the
// bare SQL of floor_intake.sql and floor_dispatch.sql, run by pgbench with
// Guardian's own batch sizes on the same database, with as many clients as
// Guardian has batch writers (batchWriters for intake, as many again for
// dispatch's claims and outcomes). Guardian's figures are held against it
// as ratios (docs/performance.md, "The floor").

// batchWriters is the batch writers of each kind the bench's Guardians
// run: GUARDIAN_BATCH_WRITERS where -env sets it, else the default.
func batchWriters() int {
	n := fulfilment.DefaultBatchWriters
	for _, kv := range guardianEnv {
		if v, ok := strings.CutPrefix(kv, "GUARDIAN_BATCH_WRITERS="); ok {
			w, err := strconv.Atoi(v)
			if err != nil || w < 1 {
				log.Fatalf("-env %s: the writers must be a whole number of at least 1", kv)
			}
			n = w
		}
	}
	return n
}

// intakeClients and wholeClients are the floor's pgbench clients: the
// writers Guardian's intake has, and with its dispatch's.
func intakeClients() int { return batchWriters() }
func wholeClients() int  { return 2 * batchWriters() }

// batches are the mean sizes of Guardian's group-commit batches in a run,
// read from its guardian_batch_items histogram: deliveries per intake
// transaction, moves per claim and outcome statement.
type batches struct{ intake, claim, outcome float64 }

// batchSizes reads the mean batch sizes so far of the processes gs
// together: each kind's items over its batches, summed over them all.
func batchSizes(ctx context.Context, gs ...*guardian) batches {
	sums, counts := map[string]float64{}, map[string]float64{}
	for _, g := range gs {
		for name, into := range map[string]map[string]float64{"guardian_batch_items_sum": sums, "guardian_batch_items_count": counts} {
			got, err := scrape(ctx, g.metrics, name)
			check(err)
			for k, v := range got {
				into[k] += v
			}
		}
	}
	mean := func(kind string) float64 {
		k := `kind="` + kind + `"`
		if counts[k] == 0 {
			return 1
		}
		return sums[k] / counts[k]
	}
	return batches{intake: mean("intake"), claim: mean("claim"), outcome: mean("outcome")}
}

func httpGet(ctx context.Context, u string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// scrape reads the samples of one metric from a Prometheus endpoint, by
// their labels as written between the braces.
func scrape(ctx context.Context, base, name string) (map[string]float64, error) {
	out, err := httpGet(ctx, strings.TrimRight(base, "/")+"/metrics")
	if err != nil {
		return nil, err
	}
	samples := map[string]float64{}
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		labels := ""
		if strings.HasPrefix(rest, "{") {
			end := strings.IndexByte(rest, '}')
			labels, rest = rest[1:end], rest[end+1:]
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err == nil {
			samples[labels] = v
		}
	}
	return samples, nil
}

// size is a batch size as pgbench is given it: a whole number, at least 1.
func size(mean float64) int { return max(1, int(math.Round(mean))) }

// floorResult is one run of the floor.
type floorResult struct {
	// perSecond is the payments the run took through its steps per second.
	perSecond float64
	// cpuMs is the Postgres CPU each payment cost, in milliseconds.
	cpuMs float64
	// harnessMs is what pgbench itself spent per payment: the floor's
	// client, on the same cores.
	harnessMs float64
	// server is what the Postgres server spent per payment taken in
	// (intakeAlone): its WAL, whole pages, block reads.
	server serverCost
}

// updates is how many fulfilment rows were updated, and how many of those
// updates were HOT (no index entry written), as Postgres has counted so
// far: a backend reports its counts when it goes idle or exits, so read
// after the processes that made them have stopped.
type updates struct{ all, hot int64 }

func fulfilmentUpdates(ctx context.Context, pool *pgxpool.Pool) updates {
	var u, last updates
	for range 20 { // until two reads a moment apart agree: every exit reported
		check(pool.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'fulfilment_move'`).Scan(&u.all, &u.hot))
		if u == last {
			break
		}
		last = u
		time.Sleep(300 * time.Millisecond)
	}
	return u
}

// hotShare is the share of the updates between a and b that were HOT.
func hotShare(a, b updates) float64 {
	if b.all == a.all {
		return 0
	}
	return float64(b.hot-a.hot) / float64(b.all-a.all)
}

// floorSQL is a floor's pair of pgbench scripts: its intake and its
// dispatch, each a file of e2e/bench or an absolute path, and the provider
// its payments are of. The floor is Guardian's schema's (bareFloor); the
// narrow row's (narrowFloor, moving.go) is made from it for the schema it
// proposes.
type floorSQL struct{ intake, dispatch, provider string }

// bareFloor's payments are of a provider of their own, "floor", apart from
// Guardian's (and a run's counts of them, indexes.go). In an index that
// leads with the provider they then land in a section of their own, a few
// thousand entries long, where a Guardian payment lands anywhere among its
// provider's: the scale run gives the floor the filled history's provider
// instead (amongProviders).
var bareFloor = floorSQL{intake: "floor_intake.sql", dispatch: "floor_dispatch.sql", provider: "floor"}

// amongProviders is f with its payments of provider, among that
// provider's in the indexes keyed by payment.
func (f floorSQL) amongProviders(provider string) floorSQL {
	f.provider = provider
	return f
}

// floorDone counts the floor's payments through to the end: jobs completed.
func floorDone(ctx context.Context, pool *pgxpool.Pool) int {
	var n int
	check(pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'floor_dispatch' AND state = 'completed'`).Scan(&n))
	return n
}

// floorJobs counts the floor's payments taken in: jobs made.
func floorJobs(ctx context.Context, pool *pgxpool.Pool) int {
	var n int
	check(pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'floor_dispatch'`).Scan(&n))
	return n
}

// whole runs intake and dispatch together for -d, in
// proportion (a client's next transaction is an intake batch or a dispatch
// batch, weighted so both move as many payments), and counts what reached
// the end.
func (f floorSQL) whole(ctx context.Context, pool *pgxpool.Pool, dbURL string, b batches) floorResult {
	bi, bd := size(b.intake), size(b.claim)
	done0, jobs0, cpu0 := floorDone(ctx, pool), floorJobs(ctx, pool), postgresCPU()
	secs, client := runPgbench(dbURL, wholeClients(), []string{"-T", strconv.Itoa(int(duration.Seconds()))}, f.provider, bi, bd,
		f.intake+"@"+strconv.Itoa(bd), f.dispatch+"@"+strconv.Itoa(bi))
	done := floorDone(ctx, pool) - done0
	// The CPU of every payment the run took in, those it left waiting
	// finished too: the whole of their work, and nothing else.
	f.drain(ctx, pool, dbURL, bd)
	return floorResult{perSecond: float64(done) / secs, cpuMs: perPayment(postgresCPU()-cpu0, floorJobs(ctx, pool)-jobs0), harnessMs: perPayment(client, done)}
}

// intakeAlone runs the intake script alone for -d.
func (f floorSQL) intakeAlone(ctx context.Context, pool *pgxpool.Pool, dbURL string, b batches) floorResult {
	bi := size(b.intake)
	jobs0, cpu0, server0 := floorJobs(ctx, pool), postgresCPU(), readServerCost(ctx, pool, dbURL)
	secs, _ := runPgbench(dbURL, intakeClients(), []string{"-T", strconv.Itoa(int(duration.Seconds()))}, f.provider, bi, 1, f.intake)
	n := floorJobs(ctx, pool) - jobs0
	cpu, server := postgresCPU()-cpu0, readServerCost(ctx, pool, dbURL).perDelivery(server0, n)
	// Unmeasured: in large batches, so the next run starts on an empty
	// queue soon (an intake-only run has no claims to size them by).
	f.drain(ctx, pool, dbURL, 100)
	return floorResult{perSecond: float64(n) / secs, cpuMs: perPayment(cpu, n), server: server}
}

// drainTimed takes in -jobs payments, then times the dispatch script
// draining them: the floor of `dispatch`.
func (f floorSQL) drainTimed(ctx context.Context, pool *pgxpool.Pool, dbURL string, b batches) floorResult {
	bd := size(b.claim)
	fill := *jobsN
	for fill > 0 { // in batches of at most 1,000: one statement each
		n := min(fill, 1000)
		runPgbench(dbURL, 1, []string{"-t", "1"}, f.provider, n, 1, f.intake)
		fill -= n
	}
	analyze(dbURL)
	done0, cpu0 := floorDone(ctx, pool), postgresCPU()
	start := time.Now()
	f.drain(ctx, pool, dbURL, bd)
	elapsed := time.Since(start)
	done := floorDone(ctx, pool) - done0
	return floorResult{perSecond: float64(done) / elapsed.Seconds(), cpuMs: perPayment(postgresCPU()-cpu0, done)}
}

// drain runs the dispatch script until no floor job is waiting, so
// each measurement starts from an empty queue.
func (f floorSQL) drain(ctx context.Context, pool *pgxpool.Pool, dbURL string, bd int) {
	for {
		var waiting int
		check(pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'floor_dispatch' AND state = 'available'`).Scan(&waiting))
		if waiting == 0 {
			return
		}
		// As few clients as the backlog needs: each is a backend started
		// and ended, whose CPU the payments would carry.
		clients := min(wholeClients(), (waiting+bd-1)/bd)
		per := max(1, waiting/(bd*clients))
		runPgbench(dbURL, clients, []string{"-t", strconv.Itoa(per)}, f.provider, 1, bd, f.dispatch)
	}
}

func perPayment(cpu time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(cpu.Microseconds()) / 1000 / float64(n)
}

// runPgbench runs the floor's scripts (name@weight) at clients with the
// provider and batch sizes given, each statement prepared once per client
// as Guardian's are, and returns how long the run took, without the
// clients' connection time.
func runPgbench(dbURL string, clients int, args []string, provider string, bi, bd int, scripts ...string) (secs float64, client time.Duration) {
	all := []string{"-n", "-M", "prepared", "-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, runtime.NumCPU())),
		"-D", "provider=" + provider, "-D", "bi=" + strconv.Itoa(bi), "-D", "bd=" + strconv.Itoa(bd)}
	all = append(all, args...)
	for _, s := range scripts {
		if !filepath.IsAbs(s) { // a script of the repository's, not one made for the run
			s = filepath.Join(repoRoot(), "e2e", "bench", s)
		}
		all = append(all, "-f", s)
	}
	cmd := exec.Command("pgbench", append(all, dbURL)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		log.Fatalf("pgbench %s: %v\n%s", strings.Join(scripts, " "), err, out)
	}
	client = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	tps := regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`).FindSubmatch(out)
	txs := regexp.MustCompile(`number of transactions actually processed: ([0-9]+)`).FindSubmatch(out)
	if tps == nil || txs == nil {
		log.Fatalf("pgbench output: %s", out)
	}
	t, _ := strconv.ParseFloat(string(tps[1]), 64)
	n, _ := strconv.ParseFloat(string(txs[1]), 64)
	if t == 0 {
		return 0, client
	}
	return n / t, client
}

func (r floorResult) String() string {
	return fmt.Sprintf("%.0f/s, %.3f ms CPU", r.perSecond, r.cpuMs)
}

// profilePipeline runs the whole pipeline once more with pprof on, takes
// Guardian's CPU and allocation profiles while the load runs, and returns
// pprof's top entries with what each payment cost in them. A run of its
// own: the profiler's cost stays out of the measured ones. The payments
// are those fulfilled inside the profiles' window (Guardian's counter at
// its ends), not the run's: a run's fulfilments go on after its load
// stops, and the window does not cover them. Beside the profile's CPU, the
// process's own from /proc over the same window says how much of it the
// profile holds.
func profilePipeline(bin, dbURL, connURL string) string {
	g := startGuardian(bin, dbURL, connURL, map[string]string{"GUARDIAN_PPROF": "true"})
	defer g.stop()
	g.warm(true) // the steady state, as the pipeline's figures are
	path := filepath.Join(filepath.Dir(bin), "cpu.pprof")
	secs := max(1, int(duration.Seconds())-1)
	allocPath := filepath.Join(filepath.Dir(bin), "allocs.pprof")
	ctx := context.Background()
	client := &http.Client{Timeout: 5 * time.Second} // a scrape of /metrics
	fulfilled := func() float64 {
		n, err := loadgen.ScrapeFulfilled(ctx, client, g.metrics)
		check(err)
		return n
	}
	// The window: from before the profiles start to after the CPU
	// profile's answer, which comes once its seconds are over.
	n0, cpu0 := fulfilled(), cpuOf(g.cmd.Process.Pid)
	var n1 float64
	var cpu1 time.Duration
	got := make(chan error, 2)
	take := func(profile, path string) { // both over the same seconds of the run
		body, err := httpGet(ctx, g.metrics+"/debug/pprof/"+profile+"?seconds="+strconv.Itoa(secs))
		if err == nil {
			err = os.WriteFile(path, []byte(body), 0o600)
		}
		if profile == "profile" {
			n1, cpu1 = fulfilled(), cpuOf(g.cmd.Process.Pid)
		}
		got <- err
	}
	go take("profile", path)
	go take("allocs", allocPath)
	bench(bin, g, 0, 1, 0, true)
	check(<-got)
	check(<-got)
	if keep := os.Getenv("BENCH_PROFILE"); keep != "" { // to read further: go tool pprof <binary> <file>
		for from, to := range map[string]string{path: keep, allocPath: keep + ".allocs"} {
			b, err := os.ReadFile(from)
			check(err)
			check(os.WriteFile(to, b, 0o600))
		}
	}
	payments := n1 - n0
	cpu, ms, err := pprofTop(bin, path, 15, map[string]float64{"ms": 1, "s": 1000})
	if err != nil {
		return "profile: " + err.Error()
	}
	allocs, bytes, err := pprofTop(bin, allocPath, 12, map[string]float64{"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}, "-sample_index=alloc_space")
	if err != nil {
		return "allocations: " + err.Error()
	}
	cpuLine, allocLine := "", ""
	if payments > 0 {
		cpuLine = fmt.Sprintf(", %.3f ms of Guardian's CPU per payment in the profile, %.3f ms by /proc", ms/payments, perPayment(cpu1-cpu0, int(payments)))
		// What its garbage collector and malloc then cost, and where.
		allocLine = fmt.Sprintf(", %.1f kB per payment", bytes/payments/1e3)
	}
	return fmt.Sprintf("Guardian's CPU profile over %d s of one pipeline run (%.0f payments fulfilled in them%s), top by own time:\n%s\n"+
		"Guardian's allocations over the same seconds%s, top by own bytes:\n%s",
		secs, payments, cpuLine, cpu, allocLine, allocs)
}

// pprofTop runs pprof's top over a profile: its entries (without the
// profile's header) and its total, in the smallest of units.
func pprofTop(bin, path string, nodes int, units map[string]float64, args ...string) (string, float64, error) {
	args = append([]string{"tool", "pprof", "-top", "-nodecount=" + strconv.Itoa(nodes)}, args...)
	out, err := exec.Command("go", append(args, bin, path)...).CombinedOutput()
	if err != nil {
		return "", 0, fmt.Errorf("%v: %s", err, out)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !slices.ContainsFunc([]string{"File:", "Build ID:", "Type:", "Time:", "Duration:"}, func(p string) bool { return strings.HasPrefix(l, p) }) {
			lines = append(lines, "  "+l)
		}
	}
	var total float64
	if m := regexp.MustCompile(`of ([0-9.]+)([a-zA-Z]*) total`).FindStringSubmatch(string(out)); m != nil {
		total, _ = strconv.ParseFloat(m[1], 64)
		total *= units[m[2]]
	}
	return strings.Join(lines, "\n"), total, nil
}
