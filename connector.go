package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/guardian-pay/guardian/app/actions"
	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/settings"
	"github.com/guardian-pay/guardian/receiver/contract"
)

const connectorUsage = `usage: guardian connector test [--action NAME[,NAME...]] [--provider NAME[,NAME...]] [--json]
  checks each action's receiver (GUARDIAN_ACTIONS_FILE's, or without one the
  receiver at GUARDIAN_CONNECTOR_URL, with GUARDIAN_CONNECTOR_SECRET,
  GUARDIAN_CONNECTOR_TIMEOUT and GUARDIAN_CONNECTOR_LOOKUP_URL) against the
  receiver's contract (docs/receivers.md): signatures and replays refused, one
  key sent twice at once acts once, a finished key replays its answer, a key
  reused with another body is refused, lookups of unknown, in-progress,
  finished and declined keys, and declines that stay declined.
  --action checks only the actions named (default: every one).
  It sends test deliveries only (event type "` + contract.TestEventType + `", keys
  starting "` + contract.TestKeyPrefix + `", payment "` + contract.TestPaymentID + `"): a
  receiver that keeps the contract records their keys and never acts on them,
  so no action is performed for any payment.
  The checks run once for each provider the configuration serves (or those
  --provider names), the deliveries naming it, so a receiver that routes by
  provider is checked along every route. A few seconds a provider and action.
  Exit 0 when every receiver keeps the contract, 1 otherwise.
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
	onlyActions := fs.String("action", "", "check these actions' receivers only (comma-separated; default: every action)")
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
	receivers, code := receiversToTest(getenv, *onlyActions, stderr)
	if receivers == nil {
		return code
	}
	type step struct {
		Action   string `json:"action"`
		Provider string `json:"provider"`
		Name     string `json:"name"`
		Status   int    `json:"status,omitempty"`
		OK       bool   `json:"ok"`
		Verdict  string `json:"verdict"`
	}
	var steps []step
	ok = true
	for _, r := range receivers {
		for _, p := range providers {
			for _, s := range r.h.Conform(ctx, p) {
				steps = append(steps, step{r.action, p, s.Name, s.Status, s.OK, s.Verdict})
				ok = ok && s.OK
			}
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
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", mark, s.Action, s.Provider, s.Name, s.Verdict)
		}
		_ = tw.Flush()
	}
	if !ok {
		return ExitFailure
	}
	return ExitOK
}

// receiverUnderTest is one action's receiver, as the conformance run
// calls it.
type receiverUnderTest struct {
	action string
	h      *connector.HTTP
}

// receiversToTest builds the receivers of the actions only names (every
// action when it is empty): the actions file's, or without one the
// connector's settings as the action fulfil. Nil and an exit code when
// there is none to test or the settings are refused.
func receiversToTest(getenv func(string) string, only string, stderr io.Writer) ([]receiverUnderTest, int) {
	env := settings.NewEnv(getenv)
	var set *actions.Set
	if actionsFile.Read(env) != "" {
		cfg, err := ConfigFromEnv(getenv)
		if err != nil {
			fmt.Fprintf(stderr, "guardian: configuration refused:\n  %s\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
			return nil, ExitUsage
		}
		set = cfg.Actions
	} else {
		r := actions.Receiver{URL: connectorURL.Read(env), LookupURL: connectorLookupURL.Read(env), Timeout: connectorTimeout.Read(env)}
		if s := connectorSecret.Read(env); s != "" {
			r.Secrets = []string{s}
		}
		if err := env.Err(); err != nil {
			return nil, fail(stderr, ExitUsage, err)
		}
		if r.URL == "" {
			fmt.Fprintln(stderr, "guardian: GUARDIAN_CONNECTOR_URL is not set, nor GUARDIAN_ACTIONS_FILE: there is no receiver to test")
			return nil, ExitUsage
		}
		set = actions.Default(r, nil)
	}
	names := settings.Split(only, ",")
	for _, n := range names {
		if _, ok := set.Action(n); !ok {
			fmt.Fprintf(stderr, "guardian: --action: %q is not one of the actions (%s)\n", n, strings.Join(set.Names(), ", "))
			return nil, ExitUsage
		}
	}
	var out []receiverUnderTest
	for _, a := range set.Actions {
		if len(names) > 0 && !slices.Contains(names, a.Name) {
			continue
		}
		r := a.Receiver
		cfg := connector.HTTPConfig{URL: r.URL, Timeout: r.Timeout, LookupURL: r.LookupURL}
		if len(r.Secrets) > 0 {
			cfg.Secret, cfg.Rotating = r.Secrets[0], r.Secrets[1:]
		}
		h, err := connector.NewHTTP(cfg)
		if err != nil {
			return nil, fail(stderr, ExitUsage, fmt.Errorf("action %s: %w", a.Name, err))
		}
		out = append(out, receiverUnderTest{a.Name, h})
	}
	return out, ExitOK
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
