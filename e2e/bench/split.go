package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/db/dbtest/pgserver"
)

// -only split: what a process adds when Guardian, not Postgres, is the
// limit (issue 36, item 5). On a machine of two cores, three processes
// beside Postgres share its cores with it, and what a node adds is hidden
// by what it takes from the database. Split honestly instead: a Postgres
// cluster of the bench's own runs alone on core 0, and each Guardian
// process runs on core 1 under a CPU quota of its own (a cgroup, as a
// container's CPU limit is), so that one process is held by its quota
// and three have three quotas against the same database. The load
// generators and the receiver run on core 1 beside them, outside the
// quotas.

var nodeCPU = flag.String("node-cpu", "0.05,0.1,0.2", "for split: the shares of a core each Guardian process may use (its cgroup's CPU quota), one comparison each")

// cpuGroupRoot is where the cgroup v1 CPU controller is mounted. The
// quotas need it writable, as root.
const cpuGroupRoot = "/sys/fs/cgroup/cpu"

// cfsPeriod is the quota's period. Short, so that a process that has
// spent its share waits a few milliseconds for the next, not a tenth of
// a second.
const cfsPeriod = 10 * time.Millisecond

// splitReady says why this machine cannot run the split, or nil.
func splitReady() error {
	if runtime.NumCPU() < 2 {
		return errors.New("it needs two cores: one for Postgres, one for Guardian")
	}
	if _, err := os.Stat(filepath.Join(cpuGroupRoot, "cpu.cfs_quota_us")); err != nil {
		return fmt.Errorf("it needs the cgroup v1 CPU controller at %s: %w", cpuGroupRoot, err)
	}
	probe := filepath.Join(cpuGroupRoot, fmt.Sprintf("guardian_bench_%d_probe", os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil {
		return fmt.Errorf("it needs to make cgroups under %s (run as root): %w", cpuGroupRoot, err)
	}
	_ = os.Remove(probe)
	for _, tool := range []string{"taskset", "pg_config"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("it needs %s (util-linux; postgresql-server-dev-all): %w", tool, err)
		}
	}
	return nil
}

// splitShares parses -node-cpu.
func splitShares() []float64 {
	var shares []float64
	for f := range strings.SplitSeq(*nodeCPU, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v <= 0 || v > 1 {
			log.Fatalf("-node-cpu: want shares of a core between 0 and 1, comma-separated; got %q", f)
		}
		shares = append(shares, v)
	}
	return shares
}

// cpuGroup is a cgroup whose processes share a CPU quota.
type cpuGroup struct{ dir string }

func newCPUGroup(name string, share float64) (*cpuGroup, error) {
	g := &cpuGroup{dir: filepath.Join(cpuGroupRoot, name)}
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		return nil, fmt.Errorf("split: making the cgroup %s: %w", g.dir, err)
	}
	// The kernel takes no quota under a millisecond: a small share gets a
	// longer period.
	period := max(cfsPeriod.Microseconds(), int64(1000/share)+1)
	quota := int64(share * float64(period))
	if err := g.write("cpu.cfs_period_us", period); err != nil {
		g.remove()
		return nil, err
	}
	if err := g.write("cpu.cfs_quota_us", quota); err != nil {
		g.remove()
		return nil, err
	}
	return g, nil
}

func (g *cpuGroup) write(file string, v int64) error {
	if err := os.WriteFile(filepath.Join(g.dir, file), []byte(strconv.FormatInt(v, 10)), 0); err != nil {
		return fmt.Errorf("split: setting %s of %s: %w", file, g.dir, err)
	}
	return nil
}

// add moves a process, every thread of it, into the group.
func (g *cpuGroup) add(pid int) error { return g.write("cgroup.procs", int64(pid)) }

// throttled is how many of the quota's periods the group has run in, and
// in how many it spent its quota and was held.
func (g *cpuGroup) throttled() (periods, held int64) {
	f, err := os.Open(filepath.Join(g.dir, "cpu.stat"))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, v, _ := strings.Cut(sc.Text(), " ")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch name {
		case "nr_periods":
			periods = n
		case "nr_throttled":
			held = n
		}
	}
	return periods, held
}

// remove deletes the group once its processes have exited.
func (g *cpuGroup) remove() {
	for range 50 {
		if err := os.Remove(g.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	log.Printf("split: could not remove the cgroup %s", g.dir)
}

// pin sets the CPU affinity of pid, all its threads, to core, or with -1
// to every core.
func pin(pid, core int) {
	cores := strconv.Itoa(core)
	if core < 0 {
		cores = fmt.Sprintf("0-%d", runtime.NumCPU()-1)
	}
	out, err := exec.Command("taskset", "-a", "-p", "-c", cores, strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		log.Fatalf("-only split needs taskset (util-linux) to pin processes to a core: %v\n%s", err, out)
	}
}

// coreBusy is how long core has been busy (neither idle nor waiting on
// I/O) since boot, from /proc/stat.
func coreBusy(core int) time.Duration {
	b, err := os.ReadFile("/proc/stat")
	check(err)
	prefix := "cpu" + strconv.Itoa(core) + " "
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		var busy int64
		for i, f := range strings.Fields(line)[1:] {
			n, _ := strconv.ParseInt(f, 10, 64)
			if i != 3 && i != 4 { // idle, iowait
				busy += n
			}
		}
		return time.Duration(busy) * time.Second / clockTick
	}
	log.Fatalf("split: no %q line in /proc/stat", strings.TrimSpace(prefix))
	return 0
}

// cluster is a Postgres server of the bench's own, made with initdb.
type cluster struct {
	dir  string
	port int
	bin  *pgserver.Binaries
}

// startCluster makes a Postgres server pinned to core, configured as
// this machine's shared one is (fsync and synchronous commit on,
// autovacuum off) with room for three processes' pools.
func startCluster(core int) *cluster {
	bin, err := pgserver.Find("initdb", "pg_ctl")
	if err != nil {
		log.Fatalf("-only split: %v", err)
	}
	root, err := os.MkdirTemp("", "guardian-split-")
	check(err)
	check(bin.Own(root))
	c := &cluster{dir: filepath.Join(root, "data"), bin: bin}
	c.port, err = pgserver.FreePort()
	check(err)
	c.reap(root)
	c.must(bin.Init(c.dir))
	c.must(pgserver.Configure(c.dir, "guardian bench -only split", pgserver.Loopback(c.port, root),
		map[string]string{"max_connections": "200", "autovacuum": "off"}))
	// The postmaster and every backend it forks inherit the affinity.
	c.must(bin.Start([]string{"taskset", "-c", strconv.Itoa(core)}, c.dir, filepath.Join(root, "log")))
	return c
}

// reap starts a watcher that outlives this process: once it has exited,
// by any path (log.Fatal skips deferred work), the watcher ends what the
// split left behind: processes still in its cgroups, the cgroups, the
// cluster and its directory.
func (c *cluster) reap(root string) {
	groups := filepath.Join(cpuGroupRoot, fmt.Sprintf("guardian_bench_%d_", os.Getpid()))
	stop := strings.Join(c.bin.Command(nil, "pg_ctl", "-D", c.dir, "-m", "immediate", "stop"), " ")
	script := `while kill -0 "$1" 2>/dev/null; do sleep 1; done
for g in "$2"*; do [ -d "$g" ] || continue; kill -9 $(cat "$g/cgroup.procs") 2>/dev/null; sleep 1; rmdir "$g"; done
[ -d "$3" ] && ` + stop + ` >/dev/null 2>&1; rm -rf "$4"`
	w := exec.Command("sh", "-c", script, "reaper", strconv.Itoa(os.Getpid()), groups, c.dir, root)
	w.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	check(w.Start())
	go func() { _ = w.Wait() }()
}

func (c *cluster) must(err error) {
	if err != nil {
		log.Fatalf("split: %v", err)
	}
}

func (c *cluster) url(database string) string { return pgserver.URL(c.port, database) }

func (c *cluster) stop() {
	c.must(c.bin.Stop(c.dir, "fast"))
	_ = os.RemoveAll(filepath.Dir(c.dir))
}

// splitRun is what n quota-held processes did together, beside nodesResult:
// how often their quotas held them, and how busy Postgres's core was.
type splitRun struct {
	nodesResult
	// held is the share of the quota's periods in which a process spent
	// its quota and waited: near 1, Guardian was the limit.
	held float64
	// pgBusy is the share of the run's time Postgres's core was busy:
	// near 1, Postgres was.
	pgBusy float64
	// pgMs is the CPU Postgres's processes spent per payment, in ms.
	pgMs float64
}

// compareSplit measures, for each share of -node-cpu, the fleets of
// quota-held processes, alternating, -runs times each, on a cluster of
// its own pinned to core 0, and returns the report's lines.
func compareSplit(ctx context.Context, bin, connURL string) string {
	head := fmt.Sprintf("processes on one database, Postgres alone on core 0 and each Guardian process held to a share of core 1 (-node-cpu), -c %d in all:", *concurrency)
	if err := splitReady(); err != nil {
		if *only == "split" {
			log.Fatalf("-only split: %v", err)
		}
		return head + "\n  not measured: " + err.Error()
	}
	shares := splitShares()
	const pgCore, guardianCore = 0, 1
	c := startCluster(pgCore)
	defer c.stop()
	// This process (the receiver), the load generators and the Guardian
	// processes it starts inherit core 1, until the split is over.
	pin(os.Getpid(), guardianCore)
	defer pin(os.Getpid(), -1)
	conn, err := pgx.Connect(ctx, c.url("postgres"))
	check(err)
	_, err = conn.Exec(ctx, "CREATE DATABASE guardian_split")
	check(err)
	check(conn.Close(ctx))
	dbURL := c.url("guardian_split")
	migrateDB(ctx, dbURL)

	lines := []string{head}
	for _, share := range shares {
		lines = append(lines, splitAt(bin, dbURL, connURL, share, pgCore)...)
	}
	return strings.Join(lines, "\n")
}

// splitAt measures the fleets, each process held to share of a core, and
// returns the report's lines for it.
func splitAt(bin, dbURL, connURL string, share float64, pgCore int) []string {
	run := func(n int, extra map[string]string) splitRun {
		groups := make([]*cpuGroup, n)
		for i := range groups {
			g, err := newCPUGroup(fmt.Sprintf("guardian_bench_%d_%d", os.Getpid(), i), share)
			check(err)
			groups[i] = g
		}
		defer func() {
			for _, g := range groups {
				g.remove()
			}
		}()
		throttled := func() (periods, held int64) {
			for _, g := range groups {
				p, h := g.throttled()
				periods, held = periods+p, held+h
			}
			return periods, held
		}
		var r splitRun
		var p0, h0 int64
		var busy0, pg0 time.Duration
		var t0 time.Time
		r.nodesResult = nodes(bin, dbURL, connURL, n, extra, nodesHooks{
			started: func(i, pid int) { check(groups[i].add(pid)) },
			begin: func() {
				p0, h0 = throttled()
				busy0, pg0, t0 = coreBusy(pgCore), postgresCPU(), time.Now()
			},
			end: func() {
				p1, h1 := throttled()
				if p1 > p0 {
					r.held = float64(h1-h0) / float64(p1-p0)
				}
				r.pgBusy = (coreBusy(pgCore) - busy0).Seconds() / time.Since(t0).Seconds()
				r.pgMs = float64((postgresCPU() - pg0).Microseconds()) / 1000
			},
		})
		r.pgMs /= float64(r.payments)
		return r
	}

	type series struct {
		nodeSeries
		held, pgBusy, pgMs []float64
	}
	fs := fleets()
	ss := make([]series, len(fs))
	for range *runs {
		for i, f := range fs {
			r := run(f.n, f.extra)
			ss[i].add(r.nodesResult)
			ss[i].held, ss[i].pgBusy, ss[i].pgMs = append(ss[i].held, r.held), append(ss[i].pgBusy, r.pgBusy), append(ss[i].pgMs, r.pgMs)
		}
	}
	s, one := summarize, ss[0]
	// A process is held by its quota when it spent it in most periods;
	// Postgres is the limit when its core is near full.
	limit := func(x series) string {
		switch {
		case s(x.pgBusy).median >= 0.85:
			return "Postgres"
		case s(x.held).median >= 0.75:
			return "Guardian"
		default:
			return "neither alone"
		}
	}
	lines := []string{fmt.Sprintf("  each held to %.2f of a core:", share)}
	for i, f := range fs {
		x := ss[i]
		lines = append(lines, fmt.Sprintf("    %-21s fulfilled end to end %s  accepted %s  quota spent in %3.0f%% of periods  Postgres's core busy %3.0f%%  CPU per payment %.2f ms (Postgres %.2f)",
			f.name, s(x.fulfilled), s(x.accepted), 100*s(x.held).median, 100*s(x.pgBusy).median, s(x.cpuMs).median, s(x.pgMs).median))
	}
	for i, f := range fs[1:] {
		x := ss[i+1]
		ratio := s(x.fulfilled).median / s(one.fulfilled).median
		lines = append(lines, fmt.Sprintf("    %s against one: fulfilled end to end %.2fx, accepted %.2fx: each process after the first adds %.2f of the first's rate (the limit: of one, %s; of three, %s)",
			f.name, ratio, s(x.accepted).median/s(one.accepted).median, (ratio-1)/2, limit(one), limit(x)))
	}
	return lines
}
