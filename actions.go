package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/guardian-pay/guardian/app/actions"
	"github.com/guardian-pay/guardian/app/settings"
	"github.com/guardian-pay/guardian/web"
)

const actionsUsage = `usage: guardian actions list [--json]
  list: the actions purchases pay for (each one's receiver, lookup, timeout and
  take-back rule; never a secret) and the routes that decide which purchases pay
  for which, as this configuration reads them: GUARDIAN_ACTIONS_FILE, or without
  one the connector's settings as the one action "fulfil" (docs/actions.md).
  Exit 2 when the configuration is refused, naming every problem.
`

// runActions runs `guardian actions`.
func runActions(_ context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	asJSON := len(args) == 2 && args[1] == "--json"
	if len(args) == 0 || args[0] != "list" || (len(args) == 2 && !asJSON) || len(args) > 2 {
		fmt.Fprint(stderr, actionsUsage)
		return ExitUsage
	}
	for _, w := range settings.Unknown(os.Environ()) {
		fmt.Fprintln(stderr, "guardian: warning: "+w)
	}
	cfg, err := ConfigFromEnv(getenv)
	if err != nil {
		fmt.Fprintf(stderr, "guardian: configuration refused:\n  %s\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return ExitUsage
	}
	view := web.ActionsOf(cfg.ActionSet())
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(view)
		return ExitOK
	}
	writeActions(stdout, view)
	return ExitOK
}

// writeActions prints the actions and the routes as two tables.
func writeActions(w io.Writer, v web.ActionsAnswer) {
	source := v.Source
	if source == "" {
		source = "no actions file: the connector is the one action"
	}
	fmt.Fprintf(w, "actions from %s (routes %s)\n\n", source, v.Digest)
	tw := table(w)
	fmt.Fprintln(tw, "ACTION\tRECEIVER\tLOOKUP\tTIMEOUT\tTAKEN BACK ON\tSECRET FROM")
	for _, a := range v.Actions {
		takeBack := strings.Join(a.TakeBack, ",")
		if takeBack == "" {
			takeBack = "never"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%gs\t%s\t%s\n", a.Name, dash(a.URL), dash(a.LookupURL), a.TimeoutSeconds, takeBack, dash(a.SecretEnv))
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	tw = table(w)
	fmt.Fprintln(tw, "ROUTE\tACTIONS\tMATCHES")
	for i, r := range v.Routes {
		name := r.Name
		if name == "" {
			name = fmt.Sprintf("route %d", i+1)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", name, strings.Join(r.Actions, ","), describeMatch(r.Match))
	}
	_ = tw.Flush()
}

// describeMatch says what a route matches, in the file's words.
func describeMatch(m actions.Match) string {
	var parts []string
	list := func(name string, values []string) {
		if len(values) > 0 {
			parts = append(parts, name+"="+strings.Join(values, "|"))
		}
	}
	list("provider", m.Providers)
	kinds := make([]string, len(m.Kinds))
	for i, k := range m.Kinds {
		kinds[i] = string(k)
	}
	list("kind", kinds)
	list("product", m.Products)
	list("price", m.Prices)
	for _, k := range slices.Sorted(maps.Keys(m.Metadata)) {
		parts = append(parts, "metadata."+k+"="+m.Metadata[k])
	}
	for _, k := range m.Present {
		parts = append(parts, "metadata."+k+" present")
	}
	if m.Mode != "" {
		parts = append(parts, "mode="+string(m.Mode))
	}
	list("currency", m.Currencies)
	if m.MinAmount != nil {
		parts = append(parts, fmt.Sprintf("amount>=%d", *m.MinAmount))
	}
	if m.MaxAmount != nil {
		parts = append(parts, fmt.Sprintf("amount<=%d", *m.MaxAmount))
	}
	if len(parts) == 0 {
		return "every paid purchase"
	}
	return strings.Join(parts, " ")
}

// dash is s, or "-" when it is empty.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
