package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/guardian-pay/guardian/app/actions"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/settings"
	"github.com/guardian-pay/guardian/web"
	"github.com/guardian-pay/guardian/web/client"
)

const actionsUsage = `usage: guardian actions list [--json]
       guardian actions apply NAME --operator WHO [--since 720h|TIME] [--until TIME] [--dry-run]
  list: the actions purchases pay for (each one's receiver, lookup, timeout and
  take-back rule; never a secret) and the routes that decide which purchases pay
  for which, as this configuration reads them: GUARDIAN_ACTIONS_FILE, or without
  one the connector's settings as the one action "fulfil" (docs/actions.md).
  apply: a purchase's actions are decided once, when it is first paid; apply
  gives the action NAME to past purchases first paid in the window (since: a
  duration back from now, or an RFC 3339 time; until: now by default) that the
  routes in force now say pay for it, and that are not taken back. Each purchase
  gets it at most once, audited under WHO's name; its other actions are not sent
  again. --dry-run counts what it would do. A payment fulfilled before actions
  existed is recorded first, as intake would, its one action decided when it
  was paid (a dry run records nothing).
  Exit 2 when the configuration is refused, naming every problem.
`

// runActions runs `guardian actions`.
func runActions(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "apply" {
		return runActionsApply(ctx, args[1:], getenv, stdout, stderr)
	}
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

// runActionsApply runs `guardian actions apply`.
func runActionsApply(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("actions apply", flag.ContinueOnError)
	fs.SetOutput(stderr)
	operator := fs.String("operator", "", "who applies it, for the audit (required)")
	since := fs.String("since", "720h", "the window's start: a duration back from now, or an RFC 3339 time")
	until := fs.String("until", "", "the window's end, an RFC 3339 time (default: now)")
	dryRun := fs.Bool("dry-run", false, "count what would be applied; change nothing")
	rest, err := client.ParseInterspersed(fs, args)
	if err != nil {
		return usageExit(err)
	}
	if len(rest) != 1 || *operator == "" {
		fmt.Fprint(stderr, actionsUsage)
		return ExitUsage
	}
	p := fulfilment.ApplyParams{Action: rest[0], Operator: *operator, DryRun: *dryRun}
	if p.Since, p.Until, err = window(*since, *until, time.Now()); err != nil {
		return fail(stderr, ExitUsage, err)
	}
	a, logger, code := appFrom(ctx, getenv, stderr, commandOnly)
	if a == nil {
		return code
	}
	defer func() { _ = a.Stop(context.Background()) }()
	res, err := a.service.ApplyAction(ctx, p)
	if err != nil {
		logger.Error("apply failed; what it applied stands, each purchase whole", "action_name", p.Action, "error", err)
		return ExitFailure
	}
	verb := "applied to"
	if p.DryRun {
		verb = "would apply to"
	}
	fmt.Fprintf(stdout, "%s: %d purchases first paid since %s; %d pay for it by the routes now: %s %d, %d already pay for it, %d taken back, %d with no body left to send\n",
		p.Action, res.Considered, p.Since.UTC().Format(time.RFC3339), res.Matched, verb, res.Applied, res.Already, res.Reversed, res.Unsendable)
	return ExitOK
}

// window reads --since and --until: the start a duration back from now or
// an RFC 3339 time, the end an RFC 3339 time (zero when unset: now).
func window(since, until string, now time.Time) (from, to time.Time, err error) {
	if from, err = windowStart(since, now); err != nil {
		return time.Time{}, time.Time{}, err
	}
	if until != "" {
		if to, err = time.Parse(time.RFC3339, until); err != nil {
			return time.Time{}, time.Time{}, fmt.Errorf("--until: want an RFC 3339 time, got %q", until)
		}
	}
	return from, to, nil
}

// windowStart reads --since: a duration back from now, or an RFC 3339
// time.
func windowStart(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since: want a duration such as 720h or an RFC 3339 time, got %q", s)
	}
	return t, nil
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
