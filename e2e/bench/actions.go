package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// benchActions is the routes file of the three-action runs: every paid
// purchase pays for three actions, each at the fake connector under keys
// of its own.
const benchActions = `actions:
  licence:
    url: %[1]s
    secret_env: BENCH_RECEIVER_SECRET
  welcome_email:
    url: %[1]s
    secret_env: BENCH_RECEIVER_SECRET
    take_back: none
  crm_contact:
    url: %[1]s
    secret_env: BENCH_RECEIVER_SECRET
routes:
  - name: every purchase
    actions: [licence, welcome_email, crm_contact]
`

// compareActions measures a purchase that pays for three actions against
// one that pays for one (no actions file: today's one connector), in the
// same run, each process warmed up first as the pipeline's are, -runs
// times each, alternating:
//
//   - intake of new events (workers off), and purchases fulfilled end to
//     end (each of their actions done) as fast as they go, as ratios to
//     one action's;
//   - the cost: the CPU a purchase fulfilled end to end costs Guardian and
//     its Postgres, both given the same purchases per second (half what
//     three actions fulfilled as fast as they went), so that neither runs
//     in a regime the other does not.
//
// A purchase of three actions costs three rows, jobs and calls; the target
// is that it costs less than three purchases of one: under three times
// one's CPU. The rates do not measure that. As fast as it goes, a run of
// three actions is mostly its backlog draining, held at the default 50
// dispatch workers by River refilling them with the CPU a third idle
// (docs/performance.md, "Tuning the dispatch workers"), in small claim and
// outcome batches; one action's run is mostly intake, in large ones.
func compareActions(ctx context.Context, bin, connURL string) string {
	dir, err := os.MkdirTemp("", "guardian-bench-actions")
	check(err)
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "routes.yaml")
	check(os.WriteFile(file, []byte(fmt.Sprintf(benchActions, connURL)), 0o600))
	threeEnv := map[string]string{"GUARDIAN_ACTIONS_FILE": file, "GUARDIAN_CONNECTOR_URL": "", "BENCH_RECEIVER_SECRET": benchConnSecret}
	with := func(base map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for bk, bv := range base {
			out[bk] = bv
		}
		return out
	}
	type config struct {
		env                 map[string]string
		actions             int
		intake, purchs, cpu []float64
	}
	one, three := &config{env: nil, actions: 1}, &config{env: threeEnv, actions: 3}
	// Each measurement on a database of its own: an intake-only run leaves
	// its payments pending, and a whole-pipeline run after it would count
	// their fulfilments as its own.
	fresh := func(c *config, run int, phase string, env map[string]string) (*guardian, func()) {
		db := createDB(ctx, fmt.Sprintf("actions_%d_%d_%s", run, c.actions, phase))
		g := startGuardian(bin, db, connURL, env)
		return g, func() { g.stop(); dropDB(ctx, db) }
	}
	for run := range *runs {
		for _, c := range []*config{one, three} {
			g, done := fresh(c, run, "i", with(c.env, "GUARDIAN_WORKERS", "false"))
			g.warm(false)
			c.intake = append(c.intake, bench(bin, g, 0, 1, 0, false).PerSecond)
			done()
			g, done = fresh(c, run, "e", c.env)
			g.warm(true, "--actions", strconv.Itoa(c.actions))
			c.purchs = append(c.purchs, benchActionsRun(g, c.actions, 0).FulfilPerSecond/float64(c.actions))
			done()
		}
	}
	// At least one a second: loadgen reads a rate of 0 as no limit.
	rate := max(summarize(three.purchs).median/2, 1)
	for run := range *runs {
		for _, c := range []*config{one, three} {
			g, done := fresh(c, run, "c", c.env)
			g.warm(true, "--actions", strconv.Itoa(c.actions))
			cpu0, pg0 := cpuOf(g.cmd.Process.Pid), postgresCPU()
			r := benchActionsRun(g, c.actions, rate)
			cpu := cpuOf(g.cmd.Process.Pid) - cpu0 + postgresCPU() - pg0
			if purchases := r.Fulfilled / float64(c.actions); purchases > 0 {
				c.cpu = append(c.cpu, float64(cpu.Microseconds())/1000/purchases)
			}
			done()
		}
	}
	i1, i3, f1, f3 := summarize(one.intake), summarize(three.intake), summarize(one.purchs), summarize(three.purchs)
	var b strings.Builder
	fmt.Fprintf(&b, "intake, one action       %s  three actions %s  ratio %.2f\n", i1, i3, i3.median/i1.median)
	fmt.Fprintf(&b, "purchases fulfilled/s    one action %s  three actions %s  ratio %.2f\n", f1, f3, f3.median/f1.median)
	if len(one.cpu) == 0 || len(three.cpu) == 0 {
		b.WriteString("CPU per purchase fulfilled: a run fulfilled nothing  (three cost less than three times one: NOT met)")
		return b.String()
	}
	c1, c3 := summarize(one.cpu), summarize(three.cpu)
	verdict := "met"
	if c3.median >= 3*c1.median {
		verdict = "NOT met"
	}
	fmt.Fprintf(&b, "CPU per purchase fulfilled at %.0f purchases/s (Guardian and its Postgres)  one action %.3f ms (min %.3f, max %.3f)  three actions %.3f ms (min %.3f, max %.3f)  ratio %.2f  (three cost less than three times one, ratio < 3: %s)",
		rate, c1.median, c1.min, c1.max, c3.median, c3.min, c3.max, c3.median/c1.median, verdict)
	return b.String()
}

// benchActionsRun is the whole pipeline's run, waiting for each purchase's
// actions, every one of them, at rate purchases per second (0: as fast as
// they are answered).
func benchActionsRun(g *guardian, actions int, rate float64) benchResult {
	out, err := g.load("--concurrency", strconv.Itoa(*concurrency), "--duration", duration.String(),
		"--duplicates", "0", "--fulfilling", "1", "--wait-fulfil", "120s", "--actions", strconv.Itoa(actions),
		"--rate", strconv.FormatFloat(rate, 'f', 0, 64))
	check(err)
	var r benchResult
	check(json.Unmarshal(out, &r))
	return r
}
