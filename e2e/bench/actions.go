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
// same run: intake of new events (workers off) and purchases fulfilled end
// to end (each of their actions done), -runs times each, alternating. A
// purchase of three actions costs three rows, jobs and calls; the target is
// that it costs less than three purchases of one: an end-to-end ratio above
// 1/3.
func compareActions(ctx context.Context, bin, connURL string) string {
	dir, err := os.MkdirTemp("", "guardian-bench-actions")
	check(err)
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "routes.yaml")
	check(os.WriteFile(file, []byte(fmt.Sprintf(benchActions, connURL)), 0o600))
	three := map[string]string{"GUARDIAN_ACTIONS_FILE": file, "GUARDIAN_CONNECTOR_URL": "", "BENCH_RECEIVER_SECRET": benchConnSecret}
	with := func(base map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for bk, bv := range base {
			out[bk] = bv
		}
		return out
	}
	var intake1, intake3, e2e1, e2e3 []float64
	for run := range *runs {
		for _, c := range []struct {
			env            map[string]string
			actions        int
			intake, purchs *[]float64
		}{{nil, 1, &intake1, &e2e1}, {three, 3, &intake3, &e2e3}} {
			// Each measurement on a database of its own: an intake-only
			// run leaves its payments pending, and a whole-pipeline run
			// after it would count their fulfilments as its own.
			db := createDB(ctx, fmt.Sprintf("actions_%d_%d_i", run, c.actions))
			g := startGuardian(bin, db, connURL, with(c.env, "GUARDIAN_WORKERS", "false"))
			*c.intake = append(*c.intake, bench(bin, g, 0, 1, 0, false).PerSecond)
			g.stop()
			dropDB(ctx, db)
			db = createDB(ctx, fmt.Sprintf("actions_%d_%d_e", run, c.actions))
			g = startGuardian(bin, db, connURL, c.env)
			r := benchActionsRun(bin, g, c.actions)
			*c.purchs = append(*c.purchs, r.FulfilPerSecond/float64(c.actions))
			g.stop()
			dropDB(ctx, db)
		}
	}
	i1, i3, f1, f3 := summarize(intake1), summarize(intake3), summarize(e2e1), summarize(e2e3)
	verdict := "met"
	if f3.median/f1.median <= 1.0/3 {
		verdict = "NOT met"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "intake, one action       %s  three actions %s  ratio %.2f\n", i1, i3, i3.median/i1.median)
	fmt.Fprintf(&b, "purchases fulfilled/s    one action %s  three actions %s  ratio %.2f  (three cost less than three times one, ratio > 0.33: %s)",
		f1, f3, f3.median/f1.median, verdict)
	return b.String()
}

// benchActionsRun is the whole pipeline's run, waiting for each purchase's
// actions, every one of them.
func benchActionsRun(bin string, g *guardian, actions int) benchResult {
	out, err := g.load("--concurrency", strconv.Itoa(*concurrency), "--duration", duration.String(),
		"--duplicates", "0", "--fulfilling", "1", "--wait-fulfil", "120s", "--actions", strconv.Itoa(actions))
	check(err)
	var r benchResult
	check(json.Unmarshal(out, &r))
	return r
}
