package main

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/guardian-pay/guardian/app/loadgen"
	"github.com/guardian-pay/guardian/app/provider/providertest"
)

// The flood: what an unsigned delivery costs Guardian to refuse, per
// provider, against Stripe's (issue 31): CPU and bytes allocated per
// refused request of floodBody bytes, measured from outside on the built
// binary (its CPU in /proc, its allocations in go_memstats_alloc_bytes_total
// on the operations listener). Each request comes from an address of its
// own (X-Forwarded-For behind a trusted loopback proxy), so none is cut
// short by the per-address refusal limit: the cost of a full refusal.
const (
	floodBody     = 1 << 20
	floodRequests = 300
	floodWorkers  = 8
)

// floodEnv serves every registered provider, with its providertest
// sample's settings (Stripe's and Standard Webhooks' secrets stay the
// bench's own).
func floodEnv() map[string]string {
	env := map[string]string{"GUARDIAN_WORKERS": "false", "GUARDIAN_TRUSTED_PROXIES": "127.0.0.1/32"}
	for _, s := range providertest.Samples() {
		for k, v := range s.Settings {
			if k != "GUARDIAN_STRIPE_SECRETS" && k != "GUARDIAN_STANDARD_SECRETS" && k != "GUARDIAN_MODE" {
				env[k] = v
			}
		}
	}
	return env
}

// floodCost is what one provider's refusals cost, per request.
type floodCost struct {
	provider      string
	cpuMicros     float64
	allocKiB      float64
	status        int
	stripeRatioCP float64
	stripeRatioAl float64
}

// measureFlood sends each provider's unsigned delivery floodRequests times
// and reports the cost of each refusal.
func measureFlood(bin, dbURL, connURL string) []floodCost {
	g := startGuardian(bin, dbURL, connURL, floodEnv())
	defer g.stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: floodWorkers}}
	var out []floodCost
	var seq atomic.Int64
	for _, fc := range loadgen.ForgedDeliveries(floodBody) {
		send := func(n int) int {
			status, err := loadgen.Flood(context.Background(), client, g.url, fc, n, floodWorkers, &seq)
			check(err)
			return status
		}
		send(floodWorkers * 4) // warm: connections, the refusal recorder
		cpu0, alloc0 := cpuOf(g.cmd.Process.Pid), allocBytes(g)
		status := send(floodRequests)
		cpu, alloc := cpuOf(g.cmd.Process.Pid)-cpu0, allocBytes(g)-alloc0
		out = append(out, floodCost{provider: fc.Provider, status: status,
			cpuMicros: float64(cpu.Microseconds()) / floodRequests, allocKiB: alloc / 1024 / floodRequests})
	}
	for i := range out {
		out[i].stripeRatioCP, out[i].stripeRatioAl = out[i].cpuMicros/out[0].cpuMicros, out[i].allocKiB/out[0].allocKiB
	}
	return out
}

// allocBytes reads the process's bytes allocated so far from its metrics.
func allocBytes(g *guardian) float64 {
	resp, err := http.Get(g.metrics + "/metrics")
	check(err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_alloc_bytes_total "); ok {
			f, err := strconv.ParseFloat(v, 64)
			check(err)
			return f
		}
	}
	log.Fatal("no go_memstats_alloc_bytes_total in the metrics")
	return 0
}

// printFlood prints the flood's table and its verdict: every provider
// within 2x Stripe's CPU and allocations per refusal.
func printFlood(costs []floodCost) {
	fmt.Printf("unsigned flood, %d KiB bodies, %d each, per refused request:\n", floodBody>>10, floodRequests)
	fmt.Printf("%-13s %6s %10s %8s %12s %8s\n", "provider", "status", "cpu µs", "x stripe", "alloc KiB", "x stripe")
	ok := true
	for _, c := range costs {
		fmt.Printf("%-13s %6d %10.0f %8.2f %12.0f %8.2f\n", c.provider, c.status, c.cpuMicros, c.stripeRatioCP, c.allocKiB, c.stripeRatioAl)
		ok = ok && c.stripeRatioCP <= 2 && c.stripeRatioAl <= 2
	}
	verdict := "met"
	if !ok {
		verdict = "NOT met"
	}
	fmt.Printf("target: every provider within 2x Stripe's CPU and allocations per refusal: %s\n", verdict)
}
