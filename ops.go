package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/guardian-pay/guardian/web"
)

// More exit codes of the operator commands.
const (
	ExitConflict     = 4 // the fulfilment moved: someone resolved it first
	ExitUnauthorized = 5 // the token was refused
)

const opsUsage = `Operator commands (they talk to GUARDIAN_URL with GUARDIAN_OPERATOR_TOKEN, your
credential from 'guardian operators add'; the audit log names its operator):
  guardian fulfilments list [--state S] [FILTERS] [--payment P] [--event E] [--limit N] [--cursor C] [--json]
  guardian fulfilments show ID [--json]
  guardian fulfilments retry ID... | --listed [FILTERS] [--json]
      a new dispatch for each failed fulfilment whose payment nothing else holds
  guardian reconcile list [FILTERS] [--limit N] [--json]
  guardian reconcile recheck ID... | --listed [FILTERS] [--json]
      look parked fulfilments up at the receiver now, whatever their backoff
  guardian reconcile resolve ID --attempt N --to fulfilled|pending|cancelled --reason TEXT [--evidence TEXT] [--json]
  guardian reconcile reopen ID --attempt N --reason TEXT --evidence TEXT [--json]
  guardian events list [FILTERS] [--limit N] [--cursor C] [--json]
  guardian events show PROVIDER EVENT_ID [--json]
  guardian events replay PROVIDER EVENT_ID [--json]
FILTERS: --provider P --type T --payment-prefix P --event-prefix E --since T --until T
  (times in RFC 3339). --listed acts on the first page (at most 100) the filters list.
Exit codes: 0 ok, 1 failure, 2 usage, 3 not found, 4 conflict (moved meanwhile), 5 token refused.
`

// runOps runs one operator command.
func runOps(ctx context.Context, group string, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, opsUsage)
		return ExitUsage
	}
	verb, rest := args[0], args[1:]
	fs := flag.NewFlagSet(group+" "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the API's JSON answer")
	st := fs.String("state", "", "filter by state")
	payment := fs.String("payment", "", "filter by payment id")
	event := fs.String("event", "", "filter by event id")
	limit := fs.Int("limit", 50, "page size (1-500)")
	cursor := fs.String("cursor", "", "continue a listing")
	to := fs.String("to", "", "resolution: fulfilled, pending or cancelled")
	reason := fs.String("reason", "", "why")
	evidence := fs.String("evidence", "", "the fact behind the resolution")
	attempt := fs.Int("attempt", 0, "the attempt your decision is about, as `fulfilments show` printed it")
	listed := fs.Bool("listed", false, "act on the fulfilments the filters list (at most 100)")
	filters := map[string]*string{}
	for _, f := range []struct{ flag, param, usage string }{
		{"provider", "provider", "filter by provider"}, {"type", "type", "filter by event type"},
		{"payment-prefix", "payment_prefix", "payment ids that start with this"}, {"event-prefix", "event_prefix", "event ids that start with this"},
		{"since", "since", "created (events: first seen) at or after, RFC 3339"}, {"until", "until", "created (events: first seen) before, RFC 3339"},
	} {
		filters[f.param] = fs.String(f.flag, "", f.usage)
	}
	pos, err := parseInterspersed(fs, rest)
	if err != nil {
		return usageExit(err)
	}

	client, err := newOpsClient(getenv)
	if err != nil {
		return fail(stderr, ExitUsage, err)
	}
	out := &opsOutput{stdout: stdout, json: *asJSON}
	var raw []byte
	switch group + " " + verb {
	case "fulfilments list", "reconcile list":
		if len(pos) != 0 {
			break
		}
		if group == "reconcile" {
			*st = "needs_reconciliation"
		}
		q := listQuery(filters, map[string]string{"state": *st, "payment_id": *payment, "event_id": *event, "cursor": *cursor}, *limit)
		var list web.FulfilmentList
		if raw, err = client.do(ctx, http.MethodGet, "/api/v1/fulfilments?"+q.Encode(), nil, &list); err == nil {
			out.print(raw, func(w io.Writer) { printFulfilments(w, list, group == "reconcile") })
		}
		return exitFor(err, stderr)
	case "fulfilments show":
		if len(pos) != 1 {
			break
		}
		var d web.FulfilmentDetail
		if raw, err = client.do(ctx, http.MethodGet, "/api/v1/fulfilments/"+url.PathEscape(pos[0]), nil, &d); err == nil {
			out.print(raw, func(w io.Writer) { printDetail(w, d) })
		}
		return exitFor(err, stderr)
	case "reconcile resolve":
		if len(pos) != 1 || *to == "" {
			break
		}
		var res web.ResolveAnswer
		req := web.ResolveRequest{Resolution: *to, Attempt: *attempt, Reason: *reason, Evidence: *evidence}
		if raw, err = client.do(ctx, http.MethodPost, "/api/v1/fulfilments/"+url.PathEscape(pos[0])+"/resolve", req, &res); err == nil {
			out.print(raw, func(w io.Writer) { printMoved(w, res.Fulfilment) })
		}
		return exitFor(err, stderr)
	case "reconcile reopen":
		if len(pos) != 1 {
			break
		}
		var res web.ResolveAnswer
		req := web.ReopenRequest{Attempt: *attempt, Reason: *reason, Evidence: *evidence}
		if raw, err = client.do(ctx, http.MethodPost, "/api/v1/fulfilments/"+url.PathEscape(pos[0])+"/reopen", req, &res); err == nil {
			out.print(raw, func(w io.Writer) { printMoved(w, res.Fulfilment) })
		}
		return exitFor(err, stderr)
	case "fulfilments retry", "reconcile recheck":
		if len(pos) == 0 && !*listed || len(pos) > 0 && *listed {
			break
		}
		of, path := "failed", "/api/v1/fulfilments/retry"
		if verb == "recheck" {
			of, path = "needs_reconciliation", "/api/v1/fulfilments/recheck"
		}
		ids := pos
		if *listed {
			var list web.FulfilmentList
			if _, err = client.do(ctx, http.MethodGet, "/api/v1/fulfilments?"+listQuery(filters, map[string]string{"state": of}, 100).Encode(), nil, &list); err != nil {
				return exitFor(err, stderr)
			}
			for _, f := range list.Fulfilments {
				ids = append(ids, f.ID)
			}
			if len(ids) == 0 {
				fmt.Fprintf(stdout, "no %s fulfilment matches\n", of)
				return ExitOK
			}
		}
		var a web.BulkAnswer
		if raw, err = client.do(ctx, http.MethodPost, path, web.BulkRequest{IDs: ids}, &a); err == nil {
			out.print(raw, func(w io.Writer) { printBulk(w, a) })
		}
		return exitFor(err, stderr)
	case "events list":
		if len(pos) != 0 {
			break
		}
		var list web.EventList
		if raw, err = client.do(ctx, http.MethodGet, "/api/v1/events?"+listQuery(filters, map[string]string{"cursor": *cursor}, *limit).Encode(), nil, &list); err == nil {
			out.print(raw, func(w io.Writer) { printEvents(w, list) })
		}
		return exitFor(err, stderr)
	case "events show":
		if len(pos) != 2 {
			break
		}
		var d web.EventDetail
		if raw, err = client.do(ctx, http.MethodGet, "/api/v1/events/"+url.PathEscape(pos[0])+"/"+url.PathEscape(pos[1]), nil, &d); err == nil {
			out.print(raw, func(w io.Writer) { printEvent(w, d) })
		}
		return exitFor(err, stderr)
	case "events replay":
		if len(pos) != 2 {
			break
		}
		var a web.ReplayAnswer
		if raw, err = client.do(ctx, http.MethodPost, "/api/v1/events/"+url.PathEscape(pos[0])+"/"+url.PathEscape(pos[1])+"/replay", web.ReplayRequest{}, &a); err == nil {
			out.print(raw, func(w io.Writer) {
				fmt.Fprintf(w, "%s", strings.ReplaceAll(a.Result, "_", " "))
				if a.FulfilmentID != "" {
					fmt.Fprintf(w, ": %s", a.FulfilmentID)
				}
				fmt.Fprintln(w)
			})
		}
		return exitFor(err, stderr)
	}
	fmt.Fprint(stderr, opsUsage)
	return ExitUsage
}

// listQuery is a listing's query: the filter flags, then more, then the
// page size; empty values are left out.
func listQuery(filters map[string]*string, more map[string]string, limit int) url.Values {
	q := url.Values{}
	for k, v := range filters {
		if *v != "" {
			q.Set(k, *v)
		}
	}
	for k, v := range more {
		if v != "" {
			q.Set(k, v)
		}
	}
	q.Set("limit", fmt.Sprint(limit))
	return q
}

type opsOutput struct {
	stdout io.Writer
	json   bool
}

func (o *opsOutput) print(raw []byte, human func(io.Writer)) {
	if o.json {
		fmt.Fprintln(o.stdout, strings.TrimSpace(string(raw)))
		return
	}
	human(o.stdout)
}

// exitFor maps an API error to an exit code and says what went wrong.
func exitFor(err error, stderr io.Writer) int {
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(stderr, "guardian: %v\n", err)
	var ae *apiError
	if !errors.As(err, &ae) {
		return ExitFailure
	}
	switch ae.Status {
	case http.StatusNotFound:
		return ExitNotFound
	case http.StatusConflict:
		return ExitConflict
	case http.StatusUnauthorized:
		return ExitUnauthorized
	case http.StatusBadRequest:
		return ExitUsage
	}
	return ExitFailure
}

func printMoved(w io.Writer, f web.Fulfilment) {
	fmt.Fprintf(w, "fulfilment %s is now %s (attempt %d)\n", f.ID, f.State, f.Attempt)
}

func printFulfilments(w io.Writer, list web.FulfilmentList, parked bool) {
	tw := table(w)
	if parked {
		fmt.Fprintln(tw, "FULFILMENT\tPROVIDER\tPAYMENT\tACTION\tATTEMPT\tPARKED FOR\tCHECKS")
	} else {
		fmt.Fprintln(tw, "FULFILMENT\tPROVIDER\tPAYMENT\tACTION\tSTATE\tATTEMPT\tCREATED")
	}
	for _, f := range list.Fulfilments {
		if parked {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%d\n", f.ID, f.Provider, f.PaymentID, f.Action, f.Attempt, time.Since(f.UpdatedAt).Round(time.Second), f.Checks)
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", f.ID, f.Provider, f.PaymentID, f.Action, f.State, f.Attempt, f.CreatedAt.UTC().Format(time.RFC3339))
		}
	}
	_ = tw.Flush()
	if list.NextCursor != "" {
		fmt.Fprintf(w, "more: --cursor %s\n", list.NextCursor)
	}
}

func printBulk(w io.Writer, a web.BulkAnswer) {
	tw := table(w)
	fmt.Fprintln(tw, "FULFILMENT\tRESULT\tNEW FULFILMENT")
	for _, r := range a.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.ID, r.Result, cmp.Or(r.FulfilmentID, "-"))
	}
	_ = tw.Flush()
}

func printEvents(w io.Writer, list web.EventList) {
	tw := table(w)
	fmt.Fprintln(tw, "PROVIDER\tEVENT\tTYPE\tPAYMENT\tDELIVERIES\tFIRST SEEN")
	for _, e := range list.Events {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", e.Provider, e.EventID, e.Type, cmp.Or(e.PaymentID, "-"), e.Deliveries, e.FirstSeenAt.UTC().Format(time.RFC3339))
	}
	_ = tw.Flush()
	if list.NextCursor != "" {
		fmt.Fprintf(w, "more: --cursor %s\n", list.NextCursor)
	}
}

func printDetail(w io.Writer, d web.FulfilmentDetail) {
	f := d.Fulfilment
	fmt.Fprintf(w, "fulfilment %s\n  payment   %s %s\n  action    %s\n  key       %s\n  state     %s (attempt %d)\n  event     %s (%s), %d deliveries\n  created   %s\n\n",
		f.ID, f.Provider, f.PaymentID, f.Action, f.IdempotencyKey, f.State, f.Attempt, d.Event.EventID, d.Event.Type, d.Event.Deliveries, f.CreatedAt.UTC().Format(time.RFC3339))
	tw := table(w)
	fmt.Fprintln(tw, "WHEN\tFROM\tTO\tATTEMPT\tACTOR\tREASON\tEVIDENCE")
	for _, t := range d.Transitions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", t.CreatedAt.UTC().Format(time.RFC3339), cmp.Or(t.From, "-"), t.To, t.Attempt, t.Actor, t.Reason, string(t.Evidence))
	}
	_ = tw.Flush()
	if len(d.Checks) > 0 {
		fmt.Fprintln(w, "\nlookups:")
		tw := table(w)
		for _, c := range d.Checks {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", c.CreatedAt.UTC().Format(time.RFC3339), c.Answer, string(c.Evidence))
		}
		_ = tw.Flush()
	}
}

func printEvent(w io.Writer, d web.EventDetail) {
	e := d.Event
	fmt.Fprintf(w, "event %s %s\n  type        %s\n  payment     %s\n  deliveries  %d (first %s, last %s)\n",
		e.Provider, e.EventID, e.Type, cmp.Or(e.PaymentID, "-"), e.Deliveries, e.FirstSeenAt.UTC().Format(time.RFC3339), e.LastSeenAt.UTC().Format(time.RFC3339))
	for _, f := range d.Fulfilments {
		fmt.Fprintf(w, "  fulfilment  %s %s (attempt %d)\n", f.ID, f.State, f.Attempt)
	}
	fmt.Fprintf(w, "  payload     %s\n", string(e.Payload))
}

// parseInterspersed parses args with fs, flags before, between or after
// positional arguments, and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
