package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/settings"
	"github.com/guardian-pay/guardian/receiver/contract"
)

const connectorUsage = `usage: guardian connector test [--provider NAME[,NAME...]] [--json]
  checks the receiver at GUARDIAN_CONNECTOR_URL (with GUARDIAN_CONNECTOR_SECRET,
  GUARDIAN_CONNECTOR_TIMEOUT and GUARDIAN_CONNECTOR_LOOKUP_URL) against the
  receiver's contract (docs/receivers.md): signatures and replays refused, one
  key sent twice at once acts once, a finished key replays its answer, a key
  reused with another body is refused, lookups of unknown, in-progress,
  finished and declined keys, and declines that stay declined.
  It sends test deliveries only (event type "` + contract.TestEventType + `", keys
  starting "` + contract.TestKeyPrefix + `", payment "` + contract.TestPaymentID + `"): a
  receiver that keeps the contract records their keys and never acts on them.
  The checks run once for each provider the configuration serves (or those
  --provider names), the deliveries naming it, so a receiver that routes by
  provider is checked along every route. A few seconds a provider.
  Exit 0 when the receiver keeps the contract, 1 otherwise.
`

// runConnector runs `guardian connector test`.
func runConnector(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "test" {
		fmt.Fprint(stderr, connectorUsage)
		return ExitUsage
	}
	fs := flag.NewFlagSet("connector test", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the steps as JSON")
	only := fs.String("provider", "", "check the deliveries of these providers only (comma-separated; default: every provider served)")
	if err := fs.Parse(args[1:]); err != nil {
		return usageExit(err)
	}
	if fs.NArg() != 0 {
		fmt.Fprint(stderr, connectorUsage)
		return ExitUsage
	}
	providers, ok := providersToTest(getenv, *only, stderr)
	if !ok {
		return ExitUsage
	}
	env := settings.NewEnv(getenv)
	cfg := connector.HTTPConfig{URL: connectorURL.Read(env), Secret: connectorSecret.Read(env),
		Timeout: connectorTimeout.Read(env), LookupURL: connectorLookupURL.Read(env)}
	if err := env.Err(); err != nil {
		return fail(stderr, ExitUsage, err)
	}
	if cfg.URL == "" {
		fmt.Fprintln(stderr, "guardian: GUARDIAN_CONNECTOR_URL is not set: there is no receiver to test")
		return ExitUsage
	}
	h, err := connector.NewHTTP(cfg)
	if err != nil {
		return fail(stderr, ExitUsage, err)
	}
	type step struct {
		Provider string `json:"provider"`
		Name     string `json:"name"`
		Status   int    `json:"status,omitempty"`
		OK       bool   `json:"ok"`
		Verdict  string `json:"verdict"`
	}
	var steps []step
	ok = true
	for _, p := range providers {
		for _, s := range h.Conform(ctx, p) {
			steps = append(steps, step{p, s.Name, s.Status, s.OK, s.Verdict})
			ok = ok && s.OK
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{"ok": ok, "steps": steps})
	} else {
		tw := table(stdout)
		for _, s := range steps {
			mark := "ok"
			if !s.OK {
				mark = "PROBLEM"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", mark, s.Provider, s.Name, s.Verdict)
		}
		_ = tw.Flush()
	}
	if !ok {
		return ExitFailure
	}
	return ExitOK
}

// providersToTest is the providers whose deliveries the conformance run
// sends: those --provider names, each registered, or else every one the
// configuration serves (Stripe and Standard Webhooks always). False when
// --provider names one Guardian does not know.
func providersToTest(getenv func(string) string, only string, stderr io.Writer) ([]string, bool) {
	var known []string
	for _, d := range provider.Drivers() {
		known = append(known, d.Name)
	}
	names := settings.Split(only, ",")
	for _, p := range names {
		if !slices.Contains(known, p) {
			fmt.Fprintf(stderr, "guardian: --provider: %q is not a provider Guardian serves (%s)\n", p, strings.Join(known, ", "))
			return nil, false
		}
	}
	if len(names) > 0 {
		return names, true
	}
	// Only which providers the settings serve is read, as the development
	// profile reads them (where Stripe and Standard Webhooks are served
	// without secrets); their problems are `guardian config check`'s.
	env := settings.NewEnv(getenv)
	for _, p := range provider.Open(env, provider.ReadCommon(env, true)) {
		names = append(names, p.Name())
	}
	return names, true
}
