package wiring

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/fulfilment"
)

const connectorUsage = `usage: guardian connector test [--signed] [--json]
  tests the receiver at GUARDIAN_CONNECTOR_URL (with GUARDIAN_CONNECTOR_SECRET,
  GUARDIAN_CONNECTOR_TIMEOUT and GUARDIAN_CONNECTOR_LOOKUP_URL) without giving it
  a reason to act:
    - a test request signed with a random secret: a receiver that verifies
      signatures refuses it with 401 or 403;
    - with --signed, the same test request signed with the connector secret:
      its answer, and how Guardian would classify it. Its event_type is
      "` + connector.TestEventType + `" and it names no payment; send it only to
      a receiver that answers such requests without acting;
    - with a lookup URL, a signed lookup of the test key, which a correct
      receiver answers "not_done", signed.
  Exit 0 when every answer is what a correct receiver gives, 1 otherwise.
`

// runConnector runs `guardian connector test`.
func runConnector(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "test" {
		fmt.Fprint(stderr, connectorUsage)
		return ExitUsage
	}
	fs := flag.NewFlagSet("connector test", flag.ContinueOnError)
	fs.SetOutput(stderr)
	signed := fs.Bool("signed", false, "also send a correctly signed test request to the action URL")
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
		fmt.Fprintf(stderr, "guardian: %v\n", err)
		return ExitUsage
	}
	steps := h.Probe(ctx, connector.ProbeOptions{Signed: *signed})
	ok := true
	for _, s := range steps {
		ok = ok && s.OK
	}
	if *asJSON {
		type step struct {
			Name    string         `json:"name"`
			Status  int            `json:"status,omitempty"`
			OK      bool           `json:"ok"`
			Verdict string         `json:"verdict"`
			Detail  map[string]any `json:"detail,omitempty"`
		}
		out := make([]step, len(steps))
		for i, s := range steps {
			out[i] = step{s.Name, s.Status, s.OK, s.Verdict, s.Detail}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{"ok": ok, "steps": out})
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		for _, s := range steps {
			mark := "ok"
			if !s.OK {
				mark = "PROBLEM"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", mark, s.Name, s.Verdict)
		}
		_ = tw.Flush()
		if !*signed {
			fmt.Fprintln(stdout, "(no correctly signed request was sent to the action URL; --signed sends one)")
		}
	}
	if !ok {
		return ExitFailure
	}
	return ExitOK
}
