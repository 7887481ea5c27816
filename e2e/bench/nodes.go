package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/guardian-pay/guardian/app/loadgen"
)

// nodesResult is what n Guardian processes on one database did together.
type nodesResult struct {
	// accepted is the deliveries they answered per second, summed.
	accepted float64
	// fulfilled is the payments they fulfilled per second end to end: from
	// the first delivery to the last fulfilment of what the load accepted.
	fulfilled float64
	// cpuMs is the CPU each fulfilled payment cost the processes and
	// Postgres together, in milliseconds.
	cpuMs float64
	// payments is how many the load had fulfilled.
	payments int
	// batches are the processes' mean batch sizes, together, warm-up
	// included: each batches only what reaches it.
	batches batches
}

// nodesHooks let a caller place the processes nodes starts and measure
// alongside it. Any may be nil.
type nodesHooks struct {
	// started is called with each process's index and pid once it is ready.
	started func(i, pid int)
	// begin is called as the load starts, end once every payment is
	// fulfilled: the window nodes measures.
	begin, end func()
}

// nodes runs n whole-pipeline processes (intake and dispatch) on one
// database, with extra in their environment, each behind its own provider
// sending a share of -c concurrent new events for -d (after warmUp of
// the same, unmeasured), and waits for every fulfilling event they
// accepted to be fulfilled, counted by the processes' own metrics summed,
// the last at its time in the table.
func nodes(bin, dbURL, connURL string, n int, extra map[string]string, hooks nodesHooks) nodesResult {
	ctx := context.Background()
	gs := make([]*guardian, n)
	for i := range gs {
		gs[i] = startGuardian(bin, dbURL, connURL, extra)
		if hooks.started != nil {
			hooks.started(i, gs[i].cmd.Process.Pid)
		}
	}
	defer func() {
		for _, g := range gs {
			g.stop()
		}
	}()
	client := &http.Client{Timeout: 5 * time.Second}
	fulfilled := func() float64 {
		var sum float64
		for _, g := range gs {
			v, err := loadgen.ScrapeFulfilled(ctx, client, g.metrics)
			check(err)
			sum += v
		}
		return sum
	}
	cpu := func() time.Duration {
		total := postgresCPU()
		for _, g := range gs {
			total += cpuOf(g.cmd.Process.Pid)
		}
		return total
	}
	// drive loads every process with its share of -c new events for d,
	// and waits until each fulfilling event they accepted is fulfilled.
	drive := func(d time.Duration) (accepted float64, want int) {
		before := fulfilled()
		results := make([]benchResult, n)
		var wg sync.WaitGroup
		for i, g := range gs {
			// The same total concurrency however many processes share it.
			c := *concurrency / n
			if i < *concurrency%n {
				c++
			}
			wg.Go(func() {
				out, err := g.load("--concurrency", strconv.Itoa(max(c, 1)), "--duration", d.String(),
					"--duplicates", "0", "--fulfilling", "1", "--wait-fulfil", "0")
				check(err)
				check(json.Unmarshal(out, &results[i]))
			})
		}
		wg.Wait()
		for _, res := range results {
			accepted += res.PerSecond
			want += res.NewFulfilling
		}
		deadline := time.Now().Add(2 * time.Minute)
		for fulfilled()-before < float64(want) {
			if time.Now().After(deadline) {
				log.Fatalf("nodes: %d processes fulfilled %.0f of %d in 2 minutes", n, fulfilled()-before, want)
			}
			time.Sleep(pollEvery) // each poll scrapes every process: seldom
		}
		return accepted, want
	}
	// Unmeasured first (warmUp), and three processes have three times
	// the connections to warm; then the statistics, as g.warm.
	drive(warmUp)
	analyze(dbURL)

	cpu0 := cpu()
	if hooks.begin != nil {
		hooks.begin()
	}
	start := time.Now()
	var r nodesResult
	var want int
	r.accepted, want = drive(*duration)
	if hooks.end != nil {
		hooks.end()
	}
	r.payments, r.batches = want, batchSizes(ctx, gs...)
	r.cpuMs = float64((cpu() - cpu0).Microseconds()) / 1000 / float64(want)
	r.fulfilled = float64(want) / lastFulfilledAt(dbURL).Sub(start).Seconds()
	return r
}

// fleet is one way of running the pipeline that the node comparisons
// measure: how many processes, and what their environment adds.
type fleet struct {
	name  string
	n     int
	extra map[string]string
}

// fleets are the node comparisons' three: one process, three with the
// default batch writers each, and three with one writer each (three
// transactions at once in all, near one process's default). The first is
// what the others are held against.
func fleets() []fleet {
	return []fleet{
		{"one", 1, nil},
		{fmt.Sprintf("three, %d writers each", batchWriters()), 3, nil},
		{"three, 1 writer each", 3, map[string]string{"GUARDIAN_BATCH_WRITERS": "1"}},
	}
}

// nodeSeries is a fleet's runs.
type nodeSeries struct {
	accepted, fulfilled, cpuMs []float64
	batches                    []batches
}

func (s *nodeSeries) add(r nodesResult) {
	s.accepted, s.fulfilled, s.cpuMs = append(s.accepted, r.accepted), append(s.fulfilled, r.fulfilled), append(s.cpuMs, r.cpuMs)
	s.batches = append(s.batches, r.batches)
}

// batchSizes are the medians of the series' batch sizes, as
// intake/claim/outcome.
func (s *nodeSeries) batchSizes() string {
	median := func(of func(batches) float64) float64 {
		xs := make([]float64, len(s.batches))
		for i, b := range s.batches {
			xs[i] = of(b)
		}
		return summarize(xs).median
	}
	return fmt.Sprintf("%.1f/%.1f/%.1f", median(func(b batches) float64 { return b.intake }),
		median(func(b batches) float64 { return b.claim }), median(func(b batches) float64 { return b.outcome }))
}

// compareNodes measures each of the fleets, alternating, -runs times
// each, and returns the report's lines: each three against the one.
func compareNodes(bin, dbURL, connURL string) string {
	fs := fleets()
	series := make([]nodeSeries, len(fs))
	for range *runs {
		for i, f := range fs {
			series[i].add(nodes(bin, dbURL, connURL, f.n, f.extra, nodesHooks{}))
		}
	}
	s, one := summarize, series[0]
	lines := []string{fmt.Sprintf("processes on one database, against one (%d cores, -c %d in all):", runtime.NumCPU(), *concurrency)}
	for i, f := range fs[1:] {
		x := series[i+1]
		lines = append(lines, fmt.Sprintf("%-25s accepted %s vs %s  ratio %.2f;  fulfilled end to end %s vs %s  ratio %.2f;  CPU per payment %.2f vs %.2f ms;  batches intake/claim/outcome %s vs %s",
			"  "+f.name, s(x.accepted), s(one.accepted), s(x.accepted).median/s(one.accepted).median,
			s(x.fulfilled), s(one.fulfilled), s(x.fulfilled).median/s(one.fulfilled).median, s(x.cpuMs).median, s(one.cpuMs).median,
			x.batchSizes(), one.batchSizes()))
	}
	return strings.Join(lines, "\n")
}
