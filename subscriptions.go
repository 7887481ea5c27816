package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/web/client"
)

const subscriptionsUsage = `usage: guardian subscriptions link --operator WHO [--since 2160h|TIME] [--until TIME] [--dry-run]
  Intake links a subscription to the purchase its start paid for as it records
  the start; a subscription started before Guardian recorded links has none, and
  its end takes nothing back (it is counted as waiting for its start). link reads
  the events stored in the window again by their providers' rules and links each
  subscription one names (since: a duration back from now, or an RFC 3339 time;
  until: now by default). An end stored before is then resolved, and what the
  start granted is taken back by each action's policy, audited under WHO's name.
  A subscription linked before keeps its link; events whose body was pruned are
  not read. --dry-run counts what it would link.
`

// runSubscriptions runs `guardian subscriptions`.
func runSubscriptions(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "link" {
		fmt.Fprint(stderr, subscriptionsUsage)
		return ExitUsage
	}
	fs := flag.NewFlagSet("subscriptions link", flag.ContinueOnError)
	fs.SetOutput(stderr)
	operator := fs.String("operator", "", "who links, for the audit (required)")
	since := fs.String("since", "2160h", "the window's start: a duration back from now, or an RFC 3339 time")
	until := fs.String("until", "", "the window's end, an RFC 3339 time (default: now)")
	dryRun := fs.Bool("dry-run", false, "count what would be linked; change nothing")
	rest, err := client.ParseInterspersed(fs, args[1:])
	if err != nil {
		return usageExit(err)
	}
	if len(rest) != 0 || *operator == "" {
		fmt.Fprint(stderr, subscriptionsUsage)
		return ExitUsage
	}
	p := fulfilment.LinkParams{Operator: *operator, DryRun: *dryRun}
	if p.Since, p.Until, err = window(*since, *until, time.Now()); err != nil {
		return fail(stderr, ExitUsage, err)
	}
	a, logger, code := appFrom(ctx, getenv, stderr, commandOnly)
	if a == nil {
		return code
	}
	defer func() { _ = a.Stop(context.Background()) }()
	res, err := a.service.LinkStored(ctx, p)
	if err != nil {
		logger.Error("link failed; what it linked stands, each subscription whole", "error", err)
		return ExitFailure
	}
	verb := "linked"
	if p.DryRun {
		verb = "would link"
	}
	fmt.Fprintf(stdout, "events since %s naming a subscription's start: %d; %s %d subscriptions; %d ended before, their grants taken back by policy\n",
		p.Since.UTC().Format(time.RFC3339), res.Naming, verb, res.Linked, res.Ended)
	return ExitOK
}
