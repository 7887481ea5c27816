// Command bench measures Guardian on this machine against the ceilings it is
// held to, all in one run, and prints the ratios (`just bench`):
//
//   - intake, end-to-end fulfilment, dispatch and the CPU per payment vs the
//     floor: the bare SQL those steps need on Guardian's own tables, run by
//     pgbench at the batch sizes Guardian had in the same run (floor.go);
//   - new-event intake vs pgbench running the same SQL at the same
//     concurrency, one commit per event;
//   - duplicates through the Redis filter vs redis-benchmark of the same
//     command, and duplicates without Redis vs with it;
//   - dispatch vs bare River working no-op jobs with the same settings;
//   - p50 and p99 intake latency at half the peak rate against pgbench's
//     one commit per event at that rate, resident memory at peak, three
//     processes sharing one database against one, and Guardian's own CPU
//     profile over a pipeline run;
//   - three processes against one when Guardian is the limit: each held
//     to a CPU quota on one core, Postgres (a cluster of the bench's own)
//     alone on the other (split.go; root, for the cgroups).
//
// Each throughput is measured several times; the report gives min, median
// and max. It needs the local Postgres and Redis, pgbench and
// redis-benchmark, and builds the guardian binary itself.
package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/guardian-pay/guardian/app/loadgen"
	"github.com/guardian-pay/guardian/db/dbtest/pgserver"
	"github.com/guardian-pay/guardian/goose"
	"github.com/guardian-pay/guardian/jobs"
)

var (
	adminURL     = flag.String("db", cmp.Or(os.Getenv("TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "Postgres server URL (a database is created and dropped)")
	redisURL     = flag.String("redis", cmp.Or(os.Getenv("TEST_REDIS_URL"), "redis://127.0.0.1:6379/0"), "Redis URL")
	concurrency  = flag.Int("c", 32, "concurrency for every comparison")
	duration     = flag.Duration("d", 5*time.Second, "length of each measured run")
	runs         = flag.Int("runs", 3, "repetitions of each throughput measurement")
	jobsN        = flag.Int("jobs", 5000, "jobs for the dispatch comparison")
	only         = flag.String("only", "", "run one comparison only: intake (new events accepted with no dispatch running, and their CPU, against the floor's intake), pipeline (end to end and CPU per payment against the floor), dispatch, indexes (what each index costs a payment, on the floor), profile (Guardian's CPU profile over one pipeline run), nodes (three processes against one), split (three processes against one, each held to a CPU quota on one core while Postgres, a cluster of the bench's own, has the other: what a process adds when Guardian is the limit; needs root for the cgroups), actions (purchases of three actions against one), curve, flood (an unsigned flood per provider), scale (the cost as the tables grow to -sizes), latency (p50 and p99 at -rate against pgbench's one commit per event at the same rate), or lone (a lone delivery's p50 at -rate, 100/s unless given, parted by what its batch writes)")
	keep         = flag.Bool("keep", false, "keep the database afterwards, and say where it is (to look at its plans)")
	scaleDB      = flag.String("scale-db", "", "with -only scale: measure this database, kept by an earlier -keep run, filling it on from the payments it holds; with -only dispatch: measure dispatch on it, adding only the runs' own payments and jobs")
	dispatchProf = flag.String("dispatch-profile", "", "with -only dispatch: write the dispatching worker's CPU profile of each run's first seconds (-d) to this file, the run's number appended")
	rate         = flag.Float64("rate", 0, "with -only latency: the fixed rate of deliveries a second (half of one intake run's peak if not given)")
	curvePath    = flag.String("curve", filepath.Join(os.TempDir(), "guardian-performance-curve.png"), "where to draw throughput and p99 against concurrency (docs/performance-curve.png to redraw the repository's figure)")
)

// extraEnv is -env KEY=VALUE, repeated: set on every Guardian the bench
// starts (to compare settings, e.g. -env GUARDIAN_BATCH=1).
type extraEnv []string

func (e *extraEnv) String() string     { return strings.Join(*e, " ") }
func (e *extraEnv) Set(v string) error { *e = append(*e, v); return nil }

var guardianEnv extraEnv

func init() {
	flag.Var(&guardianEnv, "env", "KEY=VALUE set on every Guardian started (repeatable)")
}

type stats struct{ min, median, max float64 }

func summarize(xs []float64) stats {
	s := slices.Clone(xs)
	slices.Sort(s)
	return stats{s[0], s[len(s)/2], s[len(s)-1]}
}

func (s stats) String() string {
	return fmt.Sprintf("%8.0f/s (min %.0f, max %.0f)", s.median, s.min, s.max)
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "guardian-bench-")
	check(err)
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "guardian")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = repoRoot()
	build.Stderr = os.Stderr
	check(build.Run())

	conn := fakeConnector()
	defer conn.Close()
	// These two make databases of their own: no scratch database here.
	if *only == "split" {
		fmt.Println(compareSplit(ctx, bin, conn.URL))
		return
	}

	var dbURL string
	if *scaleDB != "" {
		if *only != "scale" && *only != "dispatch" {
			log.Fatal("-scale-db needs -only scale or -only dispatch")
		}
		dbURL = *scaleDB
		migrateDB(ctx, dbURL) // kept by an earlier version, perhaps
	} else if dbURL = createDB(ctx, ""); *keep {
		log.Printf("keeping the database: %s", dbURL)
	} else {
		defer dropDB(ctx, dbURL)
	}
	pool, err := pgxpool.New(ctx, dbURL)
	check(err)
	defer pool.Close()

	log.Printf("machine: %d CPUs; concurrency %d; %d runs of %s each\n", runtime.NumCPU(), *concurrency, *runs, *duration)
	if *only == "flood" {
		printFlood(measureFlood(bin, dbURL, conn.URL))
		return
	}
	if *only == "curve" {
		printCurve(measureCurve(bin, dbURL, conn.URL))
		return
	}
	if *only == "scale" {
		runScale(ctx, bin, dbURL, conn.URL, pool)
		return
	}
	if *only == "nodes" {
		fmt.Println(compareNodes(bin, dbURL, conn.URL))
		return
	}
	if *only == "intake" {
		f := &figures{}
		f.measureIntake(bin, dbURL, conn.URL, pool)
		f.printIntake()
		return
	}
	if *only == "lone" {
		g := startGuardian(bin, dbURL, conn.URL, map[string]string{"GUARDIAN_WORKERS": "false"})
		g.warm(false)
		for range *runs {
			fmt.Println(loneParts(bin, g, cmp.Or(*rate, 100)))
		}
		g.stop()
		return
	}
	if *only == "latency" {
		f := &figures{}
		// Warmed first, as a full run's tables are by then: rows, and
		// the planner's statistics of them.
		g := startGuardian(bin, dbURL, conn.URL, map[string]string{"GUARDIAN_WORKERS": "false"})
		g.warm(false)
		if f.peak.PerSecond = 2 * *rate; *rate == 0 {
			f.peak = bench(bin, g, 0, 1, 0, false)
		}
		g.stop()
		f.measureTail(bin, dbURL, conn.URL)
		f.printLatency()
		return
	}
	if *only == "pipeline" {
		f := &figures{}
		f.measurePipeline(bin, dbURL, conn.URL, pool)
		f.printPipeline()
		return
	}
	if *only == "profile" {
		fmt.Println(profilePipeline(bin, dbURL, conn.URL))
		return
	}
	if *only == "indexes" {
		g := startGuardian(bin, dbURL, conn.URL, nil)
		bench(bin, g, 0, 1, 0, true)
		b := batchSizes(ctx, g)
		g.stop()
		fmt.Print(indexCosts(ctx, pool, dbURL, b))
		return
	}
	if *only == "actions" {
		fmt.Println(compareActions(ctx, bin, conn.URL))
		return
	}
	if *only == "dispatch" {
		var disp, bare, floor, cpu, own, floorCPU []float64
		sweptOnce(ctx, bin, dbURL, conn.URL)
		for range *runs {
			d := dispatch(ctx, bin, dbURL, conn.URL, pool)
			disp, cpu, own = append(disp, d.perSecond), append(cpu, d.cpuMs), append(own, d.ownMs)
			bare = append(bare, bareRiver(ctx, pool))
			f := bareFloor.drainTimed(ctx, pool, dbURL, d.batches)
			floor, floorCPU = append(floor, f.perSecond), append(floorCPU, f.cpuMs)
		}
		fmt.Printf("dispatch                  guardian %s  bare River %s  ratio %.2f  floor %s  ratio %.2f\n", summarize(disp), summarize(bare),
			summarize(disp).median/summarize(bare).median, summarize(floor), summarize(disp).median/summarize(floor).median)
		printDispatchCPU(cpu, own, floorCPU)
		return
	}

	figures := measureAll(ctx, bin, dbURL, conn.URL, pool)
	figures.print()
	printCurve(figures.curve)
	printFlood(measureFlood(bin, dbURL, conn.URL))
}

// figures are the full run's measurements, each a list of runs.
type figures struct {
	pg, intake, accept, fulfil, cpuPerPayment []float64
	// ownCPU is the part of cpuPerPayment in Guardian's own process.
	ownCPU []float64
	// harnessCPU is what the load generator and the connector's receiver
	// spent per fulfilled payment: on the same cores, not Guardian's.
	harnessCPU []float64
	// intakeCPU is the CPU each accepted payment cost Guardian and its
	// Postgres with no dispatch running.
	intakeCPU []float64
	// intakeOwnCPU is the part of it in Guardian's own process.
	intakeOwnCPU                       []float64
	p99s, p50s, pgP99s, pgP50s         []float64
	floorIntake, floorWhole, floorDisp []floorResult
	batches, dispBatches               []batches
	// hot and floorHot are the shares of fulfilment updates that were HOT
	// in each pipeline run, Guardian's and the floor's.
	hot, floorHot                          []float64
	profile                                string
	dupRedis, dupPG, redisCeil, disp, bare []float64
	// dispCPU and dispOwnCPU are what each dispatched payment cost the
	// worker and its Postgres, and the worker alone.
	dispCPU, dispOwnCPU    []float64
	peak, half             benchResult
	rss                    float64
	nodesLine, actionsLine string
	// splitLines: processes held to a CPU quota, Postgres on a core of
	// its own (split.go).
	splitLines string
	curve      []point
}

// measureAll runs every comparison of the full run in turn.
func measureAll(ctx context.Context, bin, dbURL, connURL string, pool *pgxpool.Pool) *figures {
	f := &figures{}
	f.measureIntake(bin, dbURL, connURL, pool)
	f.measurePipeline(bin, dbURL, connURL, pool)
	f.measureTail(bin, dbURL, connURL)
	f.measureDuplicates(bin, dbURL, connURL)
	drainGuardian(ctx, bin, dbURL, connURL, pool)
	for range *runs {
		d := dispatch(ctx, bin, dbURL, connURL, pool)
		f.disp, f.dispBatches = append(f.disp, d.perSecond), append(f.dispBatches, d.batches)
		f.dispCPU, f.dispOwnCPU = append(f.dispCPU, d.cpuMs), append(f.dispOwnCPU, d.ownMs)
		f.bare = append(f.bare, bareRiver(ctx, pool))
		f.floorDisp = append(f.floorDisp, bareFloor.drainTimed(ctx, pool, dbURL, d.batches))
	}
	f.profile = profilePipeline(bin, dbURL, connURL)
	f.nodesLine = compareNodes(bin, dbURL, connURL)
	f.actionsLine = compareActions(ctx, bin, connURL)
	f.splitLines = compareSplit(ctx, bin, connURL)
	f.curve = measureCurve(bin, dbURL, connURL)
	return f
}

// measureIntake: new-event intake against pgbench's one transaction per
// event.
func (f *figures) measureIntake(bin, dbURL, connURL string, pool *pgxpool.Pool) {
	for range *runs {
		f.pg = append(f.pg, pgbench(dbURL))
		g := startGuardian(bin, dbURL, connURL, map[string]string{"GUARDIAN_WORKERS": "false"})
		g.warm(false)
		cpu0, pg0 := cpuOf(g.cmd.Process.Pid), postgresCPU()
		r := bench(bin, g, 0, 1, 0, false)
		own := cpuOf(g.cmd.Process.Pid) - cpu0
		cpu := own + postgresCPU() - pg0
		f.intake = append(f.intake, r.PerSecond)
		if r.NewFulfilling > 0 {
			f.intakeCPU = append(f.intakeCPU, float64(cpu.Microseconds())/1000/float64(r.NewFulfilling))
			f.intakeOwnCPU = append(f.intakeOwnCPU, float64(own.Microseconds())/1000/float64(r.NewFulfilling))
		}
		if r.PerSecond > f.peak.PerSecond {
			f.peak = r
		}
		f.rss = max(f.rss, g.peakRSS())
		b := batchSizes(context.Background(), g)
		g.stop()
		f.floorIntake = append(f.floorIntake, bareFloor.intakeAlone(context.Background(), pool, dbURL, b))
	}
	drainGuardian(context.Background(), bin, dbURL, connURL, pool)
}

// drainGuardian works off, unmeasured, the dispatch jobs intake-only runs
// left: a run that measures fulfilments would otherwise count them as its
// own, at the CPU of their dispatch alone.
func drainGuardian(ctx context.Context, bin, dbURL, connURL string, pool *pgxpool.Pool) {
	left := func() (n int) {
		check(pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'guardian_dispatch' AND state IN ('available', 'running', 'retryable')`).Scan(&n))
		return n
	}
	if left() == 0 {
		return
	}
	w := startGuardian(bin, dbURL, connURL, nil)
	defer w.stop()
	for left() > 0 {
		time.Sleep(200 * time.Millisecond)
	}
}

// measurePipeline: the whole pipeline in one process: acceptance,
// end-to-end fulfilment, and the CPU each fulfilled payment cost Guardian
// and its Postgres (backends, WAL writer, checkpointer).
func (f *figures) measurePipeline(bin, dbURL, connURL string, pool *pgxpool.Pool) {
	for range *runs {
		u0 := fulfilmentUpdates(context.Background(), pool)
		g := startGuardian(bin, dbURL, connURL, nil)
		g.warm(true)
		cpu0, pg0, self0 := cpuOf(g.cmd.Process.Pid), postgresCPU(), cpuOf(os.Getpid())
		r := bench(bin, g, 0, 1, 0, true)
		own := cpuOf(g.cmd.Process.Pid) - cpu0
		cpu := own + postgresCPU() - pg0
		// The receiver runs in this process, which does nothing else meanwhile.
		harness := g.loadCPU + cpuOf(os.Getpid()) - self0
		f.fulfil = append(f.fulfil, r.FulfilPerSecond)
		f.accept = append(f.accept, r.PerSecond)
		if r.Fulfilled > 0 {
			f.cpuPerPayment = append(f.cpuPerPayment, float64(cpu.Microseconds())/1000/r.Fulfilled)
			f.ownCPU = append(f.ownCPU, float64(own.Microseconds())/1000/r.Fulfilled)
			f.harnessCPU = append(f.harnessCPU, float64(harness.Microseconds())/1000/r.Fulfilled)
		}
		f.rss = max(f.rss, g.peakRSS())
		b := batchSizes(context.Background(), g)
		f.batches = append(f.batches, b)
		g.stop()
		u1 := fulfilmentUpdates(context.Background(), pool)
		f.floorWhole = append(f.floorWhole, bareFloor.whole(context.Background(), pool, dbURL, b))
		u2 := fulfilmentUpdates(context.Background(), pool)
		f.hot, f.floorHot = append(f.hot, hotShare(u0, u1)), append(f.floorHot, hotShare(u1, u2))
	}
}

// measureTail: p99 at half the peak rate, on a warmed-up process (pool
// filled, statements prepared), several times: this machine's tail is
// noisy; and pgbench's at the same rate.
func (f *figures) measureTail(bin, dbURL, connURL string) {
	g := startGuardian(bin, dbURL, connURL, map[string]string{"GUARDIAN_WORKERS": "false"})
	benchC(bin, g, *concurrency, 0, 1, 0, false)
	for range *runs {
		f.half = bench(bin, g, 0, 1, f.peak.PerSecond/2, false)
		f.p99s = append(f.p99s, f.half.P99ms)
		f.p50s = append(f.p50s, f.half.P50ms)
	}
	g.stop()
	for range *runs {
		p99, p50 := pgbenchLatency(dbURL, f.peak.PerSecond/2)
		f.pgP99s, f.pgP50s = append(f.pgP99s, p99), append(f.pgP50s, p50)
	}
}

// measureDuplicates: duplicates through the Redis filter against
// redis-benchmark, and without Redis against with.
func (f *figures) measureDuplicates(bin, dbURL, connURL string) {
	for range *runs {
		gr := startGuardian(bin, dbURL, connURL, map[string]string{"REDIS_URL": *redisURL, "GUARDIAN_REDIS_PREFIX": "bench:" + strconv.Itoa(os.Getpid()) + ":", "GUARDIAN_WORKERS": "false"})
		f.dupRedis = append(f.dupRedis, duplicates(bin, gr))
		gr.stop()
		gp := startGuardian(bin, dbURL, connURL, map[string]string{"GUARDIAN_WORKERS": "false"})
		f.dupPG = append(f.dupPG, duplicates(bin, gp))
		gp.stop()
		f.redisCeil = append(f.redisCeil, redisBenchmark())
	}
	cleanRedis()
}

// printIntake writes intake's lines: its rate and its CPU per payment,
// each beside the floor's.
func (f *figures) printIntake() {
	s := func(xs []float64) stats { return summarize(xs) }
	var rates, cpus []float64
	for _, r := range f.floorIntake {
		rates, cpus = append(rates, r.perSecond), append(cpus, r.cpuMs)
	}
	fmt.Printf("intake, new events        guardian %s  floor %s  ratio %.2f  pgbench one tx per event %s  ratio %.2f  (targets ≥ 5000/s: %s; ≥ 3x pgbench: %s)\n",
		s(f.intake), s(rates), s(f.intake).median/s(rates).median, s(f.pg), s(f.intake).median/s(f.pg).median,
		verdict(s(f.intake).median >= 5000), verdict(s(f.intake).median/s(f.pg).median >= 3))
	if len(f.intakeCPU) > 0 {
		c, fc := s(f.intakeCPU), s(cpus)
		fmt.Printf("CPU per accepted payment  guardian and its Postgres %.3f ms (min %.3f, max %.3f; Guardian's process %.3f)  floor, Postgres %.3f ms  ratio %.2f\n",
			c.median, c.min, c.max, s(f.intakeOwnCPU).median, fc.median, c.median/fc.median)
	}
}

// printLatency writes the latency line: Guardian's p50 and p99 at half its
// peak, beside pgbench's one commit per event at the same rate.
func (f *figures) printLatency() {
	s := func(xs []float64) stats { return summarize(xs) }
	p99, pgP99, p50, pgP50 := s(f.p99s), s(f.pgP99s), s(f.p50s), s(f.pgP50s)
	fmt.Printf("latency at half peak (%.0f/s) guardian p50 %.2f ms (min %.2f, max %.2f), p99 %.2f ms (min %.2f, max %.2f)  pgbench one tx per event p50 %.2f ms (min %.2f, max %.2f), p99 %.2f ms  (targets p99 < 10 ms: %s; p50 ≤ pgbench's: %s)\n",
		f.half.PerSecond, p50.median, p50.min, p50.max, p99.median, p99.min, p99.max, pgP50.median, pgP50.min, pgP50.max, pgP99.median, verdict(p99.median < 10), verdict(p50.median <= pgP50.median))
}

// print writes the full run's table, each figure against its target.
func (f *figures) print() {
	s := func(xs []float64) stats { return summarize(xs) }
	ratio := func(a, b []float64) float64 { return s(a).median / s(b).median }
	rates := func(rs []floorResult) []float64 {
		var xs []float64
		for _, r := range rs {
			xs = append(xs, r.perSecond)
		}
		return xs
	}
	var claim, outcome []float64
	for _, b := range f.dispBatches {
		claim, outcome = append(claim, b.claim), append(outcome, b.outcome)
	}
	fmt.Println()
	f.printIntake()
	fmt.Printf("whole pipeline, accepted  %s  (target ≥ 3000/s: %s)\n", s(f.accept), verdict(s(f.accept).median >= 3000))
	f.printPipeline()
	fmt.Printf("batch sizes draining a backlog (the floor's): claim %.1f, outcome %.1f\n", s(claim).median, s(outcome).median)
	fmt.Printf("dispatch                  guardian %s  bare River %s  ratio %.2f  floor %s  ratio %.2f  (target ≥ 1.0x bare River: %s)\n",
		s(f.disp), s(f.bare), ratio(f.disp, f.bare), s(rates(f.floorDisp)), ratio(f.disp, rates(f.floorDisp)), verdict(ratio(f.disp, f.bare) >= 1))
	var floorDispCPU []float64
	for _, r := range f.floorDisp {
		floorDispCPU = append(floorDispCPU, r.cpuMs)
	}
	printDispatchCPU(f.dispCPU, f.dispOwnCPU, floorDispCPU)
	f.printLatency()
	fmt.Printf("duplicates via Redis      guardian %s  redis-benchmark EXISTS %s  ratio %.2f  (target ≥ 0.3: %s)\n", s(f.dupRedis), s(f.redisCeil), ratio(f.dupRedis, f.redisCeil), verdict(ratio(f.dupRedis, f.redisCeil) >= .3))
	fmt.Printf("duplicates, Redis vs none with %s  without %s  ratio %.2f\n", s(f.dupRedis), s(f.dupPG), ratio(f.dupRedis, f.dupPG))
	fmt.Printf("peak resident memory      %.0f MiB  (target < 150 MiB: %s)\n", f.rss, verdict(f.rss < 150))
	fmt.Println(f.nodesLine)
	fmt.Println(f.splitLines)
	fmt.Println(f.actionsLine)
	fmt.Println(f.profile)
}

// printDispatchCPU writes what each dispatched payment cost against the
// floor's dispatch.
func printDispatchCPU(cpu, own, floor []float64) {
	c, fc := summarize(cpu), summarize(floor)
	fmt.Printf("CPU per dispatched payment guardian and its Postgres %.3f ms (min %.3f, max %.3f; Guardian's process %.3f)  floor, Postgres %.3f ms  ratio %.2f\n",
		c.median, c.min, c.max, summarize(own).median, fc.median, c.median/fc.median)
}

// verdict says whether a target was met.
func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// printPipeline writes the whole pipeline's figures against the floor's.
func (f *figures) printPipeline() {
	s := func(xs []float64) stats { return summarize(xs) }
	var rates, cpus, in, cl, out []float64
	for _, r := range f.floorWhole {
		rates, cpus = append(rates, r.perSecond), append(cpus, r.cpuMs)
	}
	for _, b := range f.batches {
		in, cl, out = append(in, b.intake), append(cl, b.claim), append(out, b.outcome)
	}
	fmt.Printf("batch sizes of the whole pipeline (the floor's): intake %.1f, claim %.1f, outcome %.1f\n", s(in).median, s(cl).median, s(out).median)
	fmt.Printf("end-to-end fulfilment     guardian %s  floor %s  ratio %.2f  (targets ≥ 2500/s: %s; ≥ 0.7x the floor: %s)\n",
		s(f.fulfil), s(rates), s(f.fulfil).median/s(rates).median, verdict(s(f.fulfil).median >= 2500), verdict(s(f.fulfil).median/s(rates).median >= .7))
	fmt.Printf("moving-row updates HOT    guardian %.0f%%  floor %.0f%%  (each moves the state, which fulfilment_state_idx on fulfilment_move holds, so none can be; none touches the identity's indexes)\n",
		100*s(f.hot).median, 100*s(f.floorHot).median)
	if len(f.cpuPerPayment) > 0 {
		c, fc := s(f.cpuPerPayment), s(cpus)
		fmt.Printf("CPU per fulfilled payment guardian and its Postgres %.3f ms (min %.3f, max %.3f; Guardian's process %.3f)  floor, Postgres %.3f ms  ratio %.2f  (targets ≤ 0.5 ms: %s; ≤ 1.4x the floor: %s)\n",
			c.median, c.min, c.max, s(f.ownCPU).median, fc.median, c.median/fc.median, verdict(c.median <= 0.5), verdict(c.median/fc.median <= 1.4))
		var floorHarness []float64
		for _, r := range f.floorWhole {
			floorHarness = append(floorHarness, r.harnessMs)
		}
		// Every process shares the machine's cores, so a run can fulfil at
		// most cores / (CPU per payment, its client's included): the end
		// to end ratio these costs allow, whatever the scheduling.
		h, fh, cores := s(f.harnessCPU).median, s(floorHarness).median, float64(runtime.NumCPU())
		most, floorMost := cores*1000/(c.median+h), cores*1000/(fc.median+fh)
		fmt.Printf("CPU of the clients        load generator and receiver %.3f ms per payment  pgbench %.3f ms  on %.0f shared cores at most %.0f/s against the floor's %.0f/s: end to end ratio ≤ %.2f\n",
			h, fh, cores, most, floorMost, most/floorMost)
		// What the stack allows at best: Guardian's Postgres doing no more
		// than the floor's, and its process no more than its own ends of
		// the same two HTTP exchanges, which cost about what the clients'
		// ends do (sign and send, read and verify, on either side).
		best := cores * 1000 / (fc.median + 2*h)
		fmt.Printf("end to end at best        Guardian's Postgres at the floor's and its process at the clients' cost (its ends of the same two HTTP exchanges): at most %.0f/s, ratio ≤ %.2f\n",
			best, best/floorMost)
	}
}

// measureCurve measures intake at concurrency 1 to 256 on one warmed-up
// intake-only process and draws it to -curve.
func measureCurve(bin, dbURL, connURL string) []point {
	g := startGuardian(bin, dbURL, connURL, map[string]string{"GUARDIAN_WORKERS": "false"})
	defer g.stop()
	benchC(bin, g, *concurrency, 0, 1, 0, false)
	var pts []point
	for c := 1; c <= 256; c *= 2 {
		r := benchC(bin, g, c, 0, 1, 0, false)
		pts = append(pts, point{concurrency: c, perSecond: r.PerSecond, p99ms: r.P99ms})
	}
	if *curvePath != "" {
		check(drawCurve(*curvePath, pts))
	}
	return pts
}

func printCurve(pts []point) {
	fmt.Printf("intake against concurrency (drawn to %s):\n", *curvePath)
	for _, p := range pts {
		fmt.Printf("  %4d concurrent  %7.0f/s  p99 %6.2f ms\n", p.concurrency, p.perSecond, p.p99ms)
	}
}

type benchResult = loadgen.Result

func bench(bin string, g *guardian, dup, fulfilling, rate float64, wait bool) benchResult {
	return benchC(bin, g, *concurrency, dup, fulfilling, rate, wait)
}

func benchC(bin string, g *guardian, c int, dup, fulfilling, rate float64, wait bool) benchResult {
	w := "0"
	if wait {
		w = "120s"
	}
	out, err := g.load("--concurrency", strconv.Itoa(c), "--duration", duration.String(),
		"--duplicates", fmt.Sprint(dup), "--fulfilling", fmt.Sprint(fulfilling), "--rate", fmt.Sprint(rate), "--wait-fulfil", w)
	check(err)
	var r benchResult
	check(json.Unmarshal(out, &r))
	return r
}

// loneParts parts a delivery's answer at a low rate, where each is a
// batch of one, by what its batch writes: a new event that fulfils (the
// events' statement and the fulfilments', jobs included), a new event
// that fulfils nothing (the events' statement alone), and a known event
// (the events' statement, which finds it, and its deliveries counted).
// The second is the path every delivery takes: the HTTP exchange,
// Guardian's process, the events' statement, the round trip and the
// commit.
func loneParts(bin string, g *guardian, rate float64) string {
	fulfilling := bench(bin, g, 0, 1, rate, false)
	plain := bench(bin, g, 0, 0, rate, false)
	dups := duplicatesAt(g, rate)
	return fmt.Sprintf("a lone delivery at %g/s, p50: a new event that fulfils %.2f ms; one that fulfils nothing %.2f ms; a known one %.2f ms",
		rate, fulfilling.P50ms, plain.P50ms, dups.P50ms)
}

// duplicates sends a small set of events once, then measures a load of
// nothing but duplicates of them, as fast as answers come.
func duplicates(bin string, g *guardian) float64 {
	return duplicatesAt(g, 0).PerSecond
}

// duplicatesAt is duplicates' load at rate deliveries a second (0: as
// fast as answers come).
func duplicatesAt(g *guardian, rate float64) benchResult {
	prefix := "dup" + strconv.FormatInt(time.Now().UnixNano(), 36)
	out, err := g.load("--concurrency", "4", "--duration", "1s", "--duplicates", "0", "--prefix", prefix, "--wait-fulfil", "0")
	check(err)
	var r benchResult
	check(json.Unmarshal(out, &r))
	out, err = g.load("--concurrency", strconv.Itoa(*concurrency), "--duration", duration.String(), "--rate", fmt.Sprint(rate),
		"--duplicates", "1", "--prefix", prefix, "--wait-fulfil", "0", "--seed", strconv.Itoa(r.Deliveries))
	check(err)
	check(json.Unmarshal(out, &r))
	return r
}

func pgbench(dbURL string) float64 {
	script := filepath.Join(repoRoot(), "e2e", "bench", "intake.sql")
	out, err := exec.Command("pgbench", "-n", "-M", "prepared", "-c", strconv.Itoa(*concurrency), "-j", strconv.Itoa(runtime.NumCPU()), "-T", strconv.Itoa(int(duration.Seconds())), "-f", script, dbURL).CombinedOutput()
	if err != nil {
		log.Fatalf("pgbench: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`).FindSubmatch(out)
	if m == nil {
		log.Fatalf("pgbench output: %s", out)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// pgbenchLatency runs the intake SQL at a fixed rate and returns its p99
// and p50 latencies in milliseconds: one commit per event, what Guardian's
// own latencies are held against.
func pgbenchLatency(dbURL string, rate float64) (p99, p50 float64) {
	dir, err := os.MkdirTemp("", "pgbench-log-")
	check(err)
	defer os.RemoveAll(dir)
	script := filepath.Join(repoRoot(), "e2e", "bench", "intake.sql")
	out, err := exec.Command("pgbench", "-n", "-M", "prepared", "-c", strconv.Itoa(*concurrency), "-j", strconv.Itoa(runtime.NumCPU()), "-T", strconv.Itoa(int(duration.Seconds())),
		"-R", fmt.Sprint(int(rate)), "-f", script, "--log", "--log-prefix", filepath.Join(dir, "l"), dbURL).CombinedOutput()
	if err != nil {
		log.Fatalf("pgbench: %v\n%s", err, out)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "l*"))
	var lat []float64
	for _, f := range files {
		b, err := os.ReadFile(f)
		check(err)
		for _, line := range strings.Split(string(b), "\n") {
			// client tx time_us script epoch epoch_us lag_us: with --rate,
			// time counts from the scheduled start; subtract the lag to get
			// the transaction's own latency, as guardian bench measures it.
			fields := strings.Fields(line)
			if len(fields) >= 7 {
				us, _ := strconv.ParseFloat(fields[2], 64)
				lag, _ := strconv.ParseFloat(fields[6], 64)
				lat = append(lat, (us-lag)/1000)
			}
		}
	}
	if len(lat) == 0 {
		return 0, 0
	}
	slices.Sort(lat)
	return lat[min(len(lat)-1, len(lat)*99/100)], lat[len(lat)/2]
}

func redisBenchmark() float64 {
	u, err := url.Parse(*redisURL)
	check(err)
	host, port, _ := net.SplitHostPort(u.Host)
	n := strconv.Itoa(max(20000, int(duration.Seconds())*20000))
	out, err := exec.Command("redis-benchmark", "-h", host, "-p", port, "-c", strconv.Itoa(*concurrency), "-n", n, "-q", "EXISTS", "bench:ceiling:stripe:evt_x").CombinedOutput()
	if err != nil {
		log.Fatalf("redis-benchmark: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`([0-9.]+) requests per second`).FindSubmatch(out)
	if m == nil {
		log.Fatalf("redis-benchmark output: %s", out)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

func cleanRedis() {
	u, _ := url.Parse(*redisURL)
	host, port, _ := net.SplitHostPort(u.Host)
	_ = exec.Command("sh", "-c", fmt.Sprintf("redis-cli -h %s -p %s --scan --pattern 'bench:%d:*' | xargs -r redis-cli -h %s -p %s del > /dev/null", host, port, os.Getpid(), host, port)).Run()
}

// dispatchRun is one dispatch measurement: the rate, the CPU each
// payment cost the worker and its Postgres from the moment it was ready
// (ownMs: the worker's own process), and the batch sizes it had.
type dispatchRun struct {
	perSecond, cpuMs, ownMs float64
	batches                 batches
}

// dispatch enqueues -jobs fulfilments with an intake-only process, then
// times a worker process draining them through the HTTP connector.
func dispatch(ctx context.Context, bin, dbURL, connURL string, pool *pgxpool.Pool) dispatchRun {
	g := startGuardian(bin, dbURL, connURL, map[string]string{"GUARDIAN_WORKERS": "false"})
	// The run's work is what was fulfilled from here on (the oldest
	// pending first, which at a size of -only scale are the intake runs'):
	// counted through the (state, updated_at) index from now, not the
	// whole state, which at ten million payments read 222,000 blocks
	// through the cache the run is measured in.
	var since time.Time
	check(pool.QueryRow(ctx, `SELECT now()`).Scan(&since))
	out, err := g.load("--concurrency", strconv.Itoa(*concurrency), "--duration", "60s",
		"--duplicates", "0", "--wait-fulfil", "0", "--max", strconv.Itoa(*jobsN))
	check(err)
	g.stop()
	var r benchResult
	check(json.Unmarshal(out, &r))
	var pprof map[string]string
	if *dispatchProf != "" {
		pprof = map[string]string{"GUARDIAN_PPROF": "true"}
	}
	w := startGuardian(bin, dbURL, connURL, pprof)
	profiled := make(chan error, 1)
	if pprof != nil {
		dispatchRuns++
		path := fmt.Sprintf("%s.%d", *dispatchProf, dispatchRuns)
		go func() {
			body, err := httpGet(ctx, w.metrics+"/debug/pprof/profile?seconds="+strconv.Itoa(max(1, int(duration.Seconds()))))
			if err == nil {
				err = os.WriteFile(path, []byte(body), 0o600)
			}
			profiled <- err
		}()
	} else {
		profiled <- nil
	}
	// The worker's own counter, read every quarter second, says when it is
	// done, and the last outcome's time in the table when it was: polling
	// either every few milliseconds would take CPU from the work measured
	// (each scrape of /metrics reads /proc for the process collector: an
	// eighth of the worker's profile at 20 ms), which bare River's
	// in-process counter does not.
	client := &http.Client{Timeout: 5 * time.Second}
	cpu0, pg0 := cpuOf(w.cmd.Process.Pid), postgresCPU()
	n0, err := loadgen.ScrapeFulfilled(ctx, client, w.metrics)
	check(err)
	var n float64
	for {
		n, err = loadgen.ScrapeFulfilled(ctx, client, w.metrics)
		check(err)
		if int(n) >= r.NewFulfilling {
			break
		}
		time.Sleep(pollEvery)
	}
	// From the worker's readiness: startGuardian's ANALYZE before it is
	// the bench's, not the worker's (seconds at a million payments).
	elapsed := lastFulfilledAt(dbURL).Sub(w.ready)
	own := cpuOf(w.cmd.Process.Pid) - cpu0
	cpu := own + postgresCPU() - pg0
	b := batchSizes(ctx, w)
	check(<-profiled)
	w.stop()
	var fulfilled int
	check(pool.QueryRow(ctx, `SELECT count(*) FROM fulfilment WHERE state = 'fulfilled' AND updated_at >= $1`, since).Scan(&fulfilled))
	if fulfilled < r.NewFulfilling {
		log.Fatalf("dispatch: the worker counted %d fulfilled, the table holds %d new", r.NewFulfilling, fulfilled)
	}
	done := int(n - n0)
	return dispatchRun{perSecond: float64(r.NewFulfilling) / elapsed.Seconds(), cpuMs: perPayment(cpu, done), ownMs: perPayment(own, done), batches: b}
}

// dispatchRuns numbers the profiles -dispatch-profile writes.
var dispatchRuns int

// sweptOnce runs a leader on dbURL until its take-back sweep has finished
// a round, then stops it. A deployment's database has had a leader all
// along; one the bench filled has not, nor one kept from a run more than
// an hour ago, and the first leader on it starts with the hourly full
// take-back round, over every reversed payment (docs/performance.md, "Ten
// million payments on huge pages"). Every process the bench starts is a
// new leader: without this, each dispatch run at ten million payments
// held that round on one of the two cores, and lost it unfinished when
// the run's process stopped, so that the next run began it again. The
// hourly round is timed apart (measureTakeBack). It is to be called where
// nothing is pending: the leader's workers dispatch whatever is.
func sweptOnce(ctx context.Context, bin, dbURL, connURL string) {
	start := time.Now()
	g := startGuardian(bin, dbURL, connURL, nil)
	defer g.stop()
	for {
		runs, err := scrape(ctx, g.metrics, "guardian_maintenance_runs_total")
		check(err)
		if runs[`outcome="error",service="sweep_reversed"`] > 0 {
			log.Fatal("swept once: the take-back round failed")
		}
		if runs[`outcome="ok",service="sweep_reversed"`] > 0 {
			break
		}
		if time.Since(start) > 10*time.Minute {
			log.Fatal("swept once: no take-back round finished in 10 minutes")
		}
		time.Sleep(pollEvery)
	}
	log.Printf("a leader swept %s once in %s", dbName(dbURL), time.Since(start).Round(time.Millisecond))
}

// pollEvery is how often the bench asks a Guardian whether it is done.
const pollEvery = 250 * time.Millisecond

// lastFulfilledAt is when the latest fulfilment was recorded fulfilled,
// by Postgres's clock, this machine's: the end of a run, read once after
// it rather than found by polling.
func lastFulfilledAt(dbURL string) time.Time {
	conn, err := pgx.Connect(context.Background(), dbURL)
	check(err)
	defer conn.Close(context.Background())
	var at time.Time
	// Up to now: a database filled by an older bench holds refunds dated
	// a day after their payment, the newest in the future, which made a
	// dispatch at a million payments look a day long.
	check(conn.QueryRow(context.Background(), `SELECT max(updated_at) FROM fulfilment WHERE state = 'fulfilled' AND updated_at <= now()`).Scan(&at))
	return at
}

type noopArgs struct{ N int }

func (noopArgs) Kind() string { return "bench_noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	done *atomic.Int64
}

func (w *noopWorker) Work(context.Context, *river.Job[noopArgs]) error {
	w.done.Add(1)
	return nil
}

// dispatchWorkers is how many dispatches a Guardian of this run works at
// once: its default, or what -env GUARDIAN_DISPATCH_WORKERS sets.
func dispatchWorkers() int {
	n := jobs.DefaultDispatchWorkers
	for _, kv := range guardianEnv {
		if v, ok := strings.CutPrefix(kv, "GUARDIAN_DISPATCH_WORKERS="); ok {
			var err error
			n, err = strconv.Atoi(v)
			check(err)
		}
	}
	return n
}

// bareRiver works -jobs no-op jobs with the settings Guardian's dispatch
// uses: as many workers, River's fetch cooldown.
func bareRiver(ctx context.Context, pool *pgxpool.Pool) float64 {
	var done atomic.Int64
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{done: &done})
	logger := slog.New(slog.DiscardHandler)
	insert, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: logger, Workers: workers})
	check(err)
	params := make([]river.InsertManyParams, *jobsN)
	for i := range params {
		params[i] = river.InsertManyParams{Args: noopArgs{N: i}, InsertOpts: &river.InsertOpts{Queue: "bench"}}
	}
	_, err = insert.InsertMany(ctx, params)
	check(err)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger: logger, Workers: workers, Queues: map[string]river.QueueConfig{"bench": {MaxWorkers: dispatchWorkers()}},
		FetchCooldown: jobs.FetchCooldown, // Guardian's dispatch settings
	})
	check(err)
	start := time.Now()
	check(client.Start(ctx))
	for done.Load() < int64(*jobsN) {
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	check(client.Stop(ctx))
	_, err = pool.Exec(ctx, `DELETE FROM river_job WHERE kind = 'bench_noop'`)
	check(err)
	return float64(*jobsN) / elapsed.Seconds()
}

type guardian struct {
	bin     string
	dbURL   string
	cmd     *exec.Cmd
	url     string
	metrics string    // the operations listener
	ready   time.Time // when the process first answered /readyz
	// loadCPU is what the last load run's generator spent.
	loadCPU time.Duration
}

// Secrets of this run, made fresh: the development constants are refused
// outside the development profile.
var (
	benchStripeSecret   = "whsec_" + rand.Text()
	benchStandardSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte(rand.Text()))
	benchConnSecret     = "whsec_" + base64.StdEncoding.EncodeToString([]byte(rand.Text()))
	benchAdminToken     = "bench-admin-" + rand.Text()
)

// warmUp is the load each measured process gets first, unmeasured: a new
// process's connections plan each statement several times before
// Postgres keeps a generic plan (3 ms a plan for the fulfilments'
// statement in a cold process on the development VM), which a run of a
// few seconds would count as the payments' cost and a long-running
// deployment pays once per connection.
const warmUp = time.Second

// warm sends g warmUp of new events and, with fulfil, waits until they
// are fulfilled, then analyzes the tables it grew, as a deployment's
// autovacuum would have by then: the new statistics invalidate the plans
// the process's connections cached on the tables' first rows. Without
// it, a connection that first checked a foreign key while a table was
// a page or two keeps a sequential scan for that check for its life
// (0.06 ms and 40 pages a check where the index takes 0.004 ms and 5,
// three checks a payment), and which runs paid that depended on which
// connections planned first (docs/performance.md, "Plans made on empty
// tables").
func (g *guardian) warm(fulfil bool, args ...string) {
	wait := "0"
	if fulfil {
		wait = "120s"
	}
	_, err := g.load(append([]string{"--concurrency", strconv.Itoa(*concurrency), "--duration", warmUp.String(), "--duplicates", "0", "--fulfilling", "1", "--wait-fulfil", wait}, args...)...)
	check(err)
	analyze(g.dbURL)
}

// load runs `guardian bench` against g with args and returns its JSON.
func (g *guardian) load(args ...string) ([]byte, error) {
	cmd := exec.Command(g.bin, append([]string{"bench", "--url", g.url, "--metrics-url", g.metrics, "--json"}, args...)...)
	cmd.Env = append(os.Environ(), "GUARDIAN_STRIPE_SECRETS="+benchStripeSecret)
	out, err := cmd.Output()
	if cmd.ProcessState != nil {
		g.loadCPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	return out, err
}

// analyze refreshes the planner's statistics. Autovacuum is off on the
// development machine's shared Postgres; a deployment's autovacuum keeps
// them, so the bench does what it would before each process starts.
func analyze(dbURL string) {
	conn, err := pgx.Connect(context.Background(), dbURL)
	check(err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(context.Background(), "ANALYZE")
	check(err)
}

func startGuardian(bin, dbURL, connURL string, extra map[string]string) *guardian {
	analyze(dbURL)
	addr, metricsAddr := freePort(), freePort()
	cmd := exec.Command(bin, "serve")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + dbURL, "GUARDIAN_ADDR=" + addr, "GUARDIAN_METRICS_ADDR=" + metricsAddr,
		"GUARDIAN_STRIPE_SECRETS=" + benchStripeSecret, "GUARDIAN_STANDARD_SECRETS=" + benchStandardSecret,
		"GUARDIAN_CONNECTOR_URL=" + connURL, "GUARDIAN_CONNECTOR_SECRET=" + benchConnSecret,
		"GUARDIAN_ADMIN_TOKEN=" + benchAdminToken, "GUARDIAN_LOG_LEVEL=warn"}
	for k, v := range extra {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, guardianEnv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	check(cmd.Start())
	g := &guardian{bin: bin, dbURL: dbURL, cmd: cmd, url: "http://" + addr, metrics: "http://" + metricsAddr}
	for {
		resp, err := http.Get(g.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				g.ready = time.Now()
				return g
			}
		}
		if time.Since(start) > 30*time.Second {
			log.Fatalf("guardian did not start: %s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePort returns a loopback address nothing listens on now, never one it
// returned before (pgserver.FreePort): a process's two listeners differ.
func freePort() string {
	port, err := pgserver.FreePort()
	check(err)
	return "127.0.0.1:" + strconv.Itoa(port)
}

// peakRSS is the process's high-water resident set, in MiB.
func (g *guardian) peakRSS() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", g.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	m := regexp.MustCompile(`VmHWM:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	kb, _ := strconv.ParseFloat(string(m[1]), 64)
	return kb / 1024
}

func (g *guardian) stop() {
	_ = g.cmd.Process.Signal(os.Interrupt)
	_ = g.cmd.Wait()
}

// fakeConnector answers every fulfilment 200 at once.
type connector struct {
	URL string
	srv *http.Server
}

func (c *connector) Close() { _ = c.srv.Close() }

func fakeConnector() *connector {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = srv.Serve(ln) }()
	return &connector{URL: "http://" + ln.Addr().String(), srv: srv}
}

// createDB creates and migrates a scratch database named for this process
// and suffix, and returns its URL.
func createDB(ctx context.Context, suffix string) string {
	conn, err := pgx.Connect(ctx, *adminURL)
	check(err)
	defer conn.Close(ctx)
	name := fmt.Sprintf("guardian_bench_%d", os.Getpid())
	if suffix != "" {
		name += "_" + suffix
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+name)
	check(err)
	u, err := url.Parse(*adminURL)
	check(err)
	u.Path = "/" + name
	migrateDB(ctx, u.String())
	return u.String()
}

// migrateDB applies Guardian's migrations to the database at dbURL.
func migrateDB(ctx context.Context, dbURL string) {
	pool, err := pgxpool.New(ctx, dbURL)
	check(err)
	defer pool.Close()
	migrator, err := goose.NewMigrator(pool)
	check(err)
	_, err = migrator.Up(ctx)
	check(err)
	check(migrator.Close())
}

func dropDB(ctx context.Context, dbURL string) {
	conn, err := pgx.Connect(ctx, *adminURL)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+dbName(dbURL)+" WITH (FORCE)")
}

// dbName is the database a Postgres URL names.
func dbName(dbURL string) string {
	u, err := url.Parse(dbURL)
	check(err)
	return strings.TrimPrefix(u.Path, "/")
}

func repoRoot() string {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	check(err)
	return strings.TrimSpace(string(out))
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
