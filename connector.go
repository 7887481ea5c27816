package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/fulfilment"
)

const connectorUsage = `usage: guardian connector test [--json]
  checks the receiver at GUARDIAN_CONNECTOR_URL (with GUARDIAN_CONNECTOR_SECRET,
  GUARDIAN_CONNECTOR_TIMEOUT and GUARDIAN_CONNECTOR_LOOKUP_URL) against the
  receiver's contract (docs/receivers.md): signatures and replays refused, one
  key sent twice at once acts once, a finished key replays its answer, a key
  reused with another body is refused, lookups of unknown, in-progress,
  finished and declined keys, and declines that stay declined.
  It sends test deliveries only (event type "` + connector.TestEventType + `", keys
  starting "` + connector.TestKeyPrefix + `", payment "` + connector.TestPaymentID + `"): a
  receiver that keeps the contract records their keys and never acts on them.
  It takes a few seconds. Exit 0 when the receiver keeps the contract, 1 otherwise.
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
	if err := fs.Parse(args[1:]); err != nil {
		return usageExit(err)
	}
	if fs.NArg() != 0 {
		fmt.Fprint(stderr, connectorUsage)
		return ExitUsage
	}
	timeout := fulfilment.DefaultConnectorTimeout
	if v := getenv("GUARDIAN_CONNECTOR_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			fmt.Fprintf(stderr, "guardian: GUARDIAN_CONNECTOR_TIMEOUT: want a positive duration such as 30s, got %q\n", v)
			return ExitUsage
		}
		timeout = d
	}
	if getenv("GUARDIAN_CONNECTOR_URL") == "" {
		fmt.Fprintln(stderr, "guardian: GUARDIAN_CONNECTOR_URL is not set: there is no receiver to test")
		return ExitUsage
	}
	h, err := connector.NewHTTP(connector.HTTPConfig{
		URL: getenv("GUARDIAN_CONNECTOR_URL"), Secret: getenv("GUARDIAN_CONNECTOR_SECRET"),
		Timeout: timeout, LookupURL: getenv("GUARDIAN_CONNECTOR_LOOKUP_URL"),
	})
	if err != nil {
		return fail(stderr, ExitUsage, err)
	}
	steps := h.Conform(ctx)
	ok := true
	for _, s := range steps {
		ok = ok && s.OK
	}
	if *asJSON {
		type step struct {
			Name    string `json:"name"`
			Status  int    `json:"status,omitempty"`
			OK      bool   `json:"ok"`
			Verdict string `json:"verdict"`
		}
		out := make([]step, len(steps))
		for i, s := range steps {
			out[i] = step{s.Name, s.Status, s.OK, s.Verdict}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{"ok": ok, "steps": out})
	} else {
		tw := table(stdout)
		for _, s := range steps {
			mark := "ok"
			if !s.OK {
				mark = "PROBLEM"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", mark, s.Name, s.Verdict)
		}
		_ = tw.Flush()
	}
	if !ok {
		return ExitFailure
	}
	return ExitOK
}
