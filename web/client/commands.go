package client

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
	"text/tabwriter"
	"time"

	"github.com/guardian-pay/guardian/web"
)

// Exit codes scripts can rely on, the guardian command's own among them.
const (
	ExitOK           = 0
	ExitFailure      = 1 // the command ran and failed
	ExitUsage        = 2 // bad arguments or configuration
	ExitNotFound     = 3 // the thing asked for does not exist
	ExitConflict     = 4 // the fulfilment moved: someone resolved it first
	ExitUnauthorized = 5 // the token was refused
)

// Usage is the operator commands' help.
const Usage = `Operator commands (they talk to GUARDIAN_URL with GUARDIAN_OPERATOR_TOKEN, your
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

// opsFlags are every operator subcommand's flag values; a subcommand
// declares only its own (opsCommand.flags), the rest stay zero.
type opsFlags struct {
	json, listed                  bool
	state, payment, event, cursor string
	to, reason, evidence          string
	limit, attempt                int
	filters                       map[string]*string
}

// opsFilters are the listing filters: flag, query parameter, usage.
var opsFilters = []struct{ flag, param, usage string }{
	{"provider", "provider", "filter by provider"}, {"type", "type", "filter by event type"},
	{"payment-prefix", "payment_prefix", "payment ids that start with this"}, {"event-prefix", "event_prefix", "event ids that start with this"},
	{"since", "since", "created (events: first seen) at or after, RFC 3339"}, {"until", "until", "created (events: first seen) before, RFC 3339"},
}

// register declares on fs the named flags only ("filters" stands for
// every listing filter).
func (f *opsFlags) register(fs *flag.FlagSet, names []string) {
	f.filters = map[string]*string{}
	for _, name := range names {
		switch name {
		case "json":
			fs.BoolVar(&f.json, "json", false, "print the API's JSON answer")
		case "listed":
			fs.BoolVar(&f.listed, "listed", false, "act on the fulfilments the filters list (at most 100)")
		case "state":
			fs.StringVar(&f.state, "state", "", "filter by state")
		case "payment":
			fs.StringVar(&f.payment, "payment", "", "filter by payment id")
		case "event":
			fs.StringVar(&f.event, "event", "", "filter by event id")
		case "cursor":
			fs.StringVar(&f.cursor, "cursor", "", "continue a listing")
		case "limit":
			fs.IntVar(&f.limit, "limit", 50, "page size (1-500)")
		case "to":
			fs.StringVar(&f.to, "to", "", "resolution: fulfilled, pending or cancelled")
		case "reason":
			fs.StringVar(&f.reason, "reason", "", "why")
		case "evidence":
			fs.StringVar(&f.evidence, "evidence", "", "the fact behind the decision")
		case "attempt":
			fs.IntVar(&f.attempt, "attempt", 0, "the attempt your decision is about, as the fulfilment's detail printed it")
		case "filters":
			for _, flt := range opsFilters {
				f.filters[flt.param] = fs.String(flt.flag, "", flt.usage)
			}
		}
	}
}

// opsCall is one operator subcommand's run: its positional arguments and
// flags, the API client, and where it prints.
type opsCall struct {
	ctx    context.Context
	group  string
	pos    []string
	f      *opsFlags
	client *api
	out    *opsOutput
	stdout io.Writer
}

// opsCommand is an operator subcommand: its arguments, a line of what it
// does, its flags, whether the arguments given fit, and what it does.
type opsCommand struct {
	args, doc string
	flags     []string
	fits      func(c opsCall) bool
	run       func(c opsCall) error
}

// nArgs fits a call with exactly n positional arguments.
func nArgs(n int) func(opsCall) bool { return func(c opsCall) bool { return len(c.pos) == n } }

// idsOrListed fits a call with ids, or --listed, not both.
func idsOrListed(c opsCall) bool { return (len(c.pos) > 0) != c.f.listed }

// opsCommands are the operator subcommands, by "group verb".
var opsCommands = map[string]opsCommand{
	"fulfilments list": {"", "list fulfilments, oldest first", []string{"state", "filters", "payment", "event", "limit", "cursor", "json"}, nArgs(0), listFulfilments},
	"fulfilments show": {"ID", "a fulfilment, its event, its transitions with evidence, its lookups", []string{"json"}, nArgs(1), showFulfilment},
	"fulfilments retry": {"ID... | --listed", "a new dispatch for each failed fulfilment whose payment nothing else holds", []string{"listed", "filters", "json"}, idsOrListed,
		bulk("failed", "/api/v1/fulfilments/retry")},
	"reconcile list": {"", "the parked fulfilments, oldest first", []string{"filters", "limit", "cursor", "json"}, nArgs(0), listFulfilments},
	"reconcile recheck": {"ID... | --listed", "look parked fulfilments up at the receiver now, whatever their backoff", []string{"listed", "filters", "json"}, idsOrListed,
		bulk("needs_reconciliation", "/api/v1/fulfilments/recheck")},
	"reconcile resolve": {"ID", "settle a parked fulfilment: --attempt, --to and --reason required", []string{"attempt", "to", "reason", "evidence", "json"},
		func(c opsCall) bool { return len(c.pos) == 1 && c.f.to != "" }, resolve},
	"reconcile reopen": {"ID", "a cancelled fulfilment back to needs_reconciliation: --attempt, --reason and --evidence required", []string{"attempt", "reason", "evidence", "json"},
		nArgs(1), reopen},
	"events list":   {"", "events, newest first, without payloads", []string{"filters", "limit", "cursor", "json"}, nArgs(0), listEvents},
	"events show":   {"PROVIDER EVENT_ID", "an event's exact signed bytes, deliveries, first and last seen, fulfilments", []string{"json"}, nArgs(2), showEvent},
	"events replay": {"PROVIDER EVENT_ID", "run a stored event through the dedup path again", []string{"json"}, nArgs(2), replay},
}

// Run runs the operator command group ("fulfilments", "reconcile" or
// "events") with args and returns the process exit code.
func Run(ctx context.Context, group string, args []string, cfg Config, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, Usage)
		return ExitUsage
	}
	verb, rest := args[0], args[1:]
	cmd, known := opsCommands[group+" "+verb]
	if !known {
		fmt.Fprintf(stderr, "guardian: %s has no command %q\n\n%s", group, verb, Usage)
		return ExitUsage
	}
	fs := flag.NewFlagSet(group+" "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f opsFlags
	f.register(fs, cmd.flags)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: guardian %s %s %s[flags]\n  %s\n", group, verb, cmd.args+strings.Repeat(" ", min(len(cmd.args), 1)), cmd.doc)
		fs.PrintDefaults()
	}
	if len(rest) > 0 && IsHelp(rest[0]) {
		fs.SetOutput(stdout)
		fs.Usage()
		return ExitOK
	}
	pos, err := ParseInterspersed(fs, rest)
	if err != nil {
		return UsageExit(err)
	}
	c := opsCall{ctx: ctx, group: group, pos: pos, f: &f, out: &opsOutput{stdout: stdout, json: f.json}, stdout: stdout}
	if !cmd.fits(c) {
		fs.Usage()
		return ExitUsage
	}
	if c.client, err = newAPI(cfg); err != nil {
		return Fail(stderr, ExitUsage, err)
	}
	return exitFor(cmd.run(c), stderr)
}

func listFulfilments(c opsCall) error {
	reconcile := c.group == "reconcile"
	if reconcile {
		c.f.state = "needs_reconciliation"
	}
	q := listQuery(c.f.filters, map[string]string{"state": c.f.state, "payment_id": c.f.payment, "event_id": c.f.event, "cursor": c.f.cursor}, c.f.limit)
	var list web.FulfilmentList
	raw, err := c.client.do(c.ctx, http.MethodGet, "/api/v1/fulfilments?"+q.Encode(), nil, &list)
	if err == nil {
		c.out.print(raw, func(w io.Writer) { printFulfilments(w, list, reconcile) })
	}
	return err
}

func showFulfilment(c opsCall) error {
	var d web.FulfilmentDetail
	raw, err := c.client.do(c.ctx, http.MethodGet, "/api/v1/fulfilments/"+url.PathEscape(c.pos[0]), nil, &d)
	if err == nil {
		c.out.print(raw, func(w io.Writer) { printDetail(w, d) })
	}
	return err
}

func resolve(c opsCall) error {
	var res web.ResolveAnswer
	req := web.ResolveRequest{Resolution: c.f.to, Attempt: c.f.attempt, Reason: c.f.reason, Evidence: c.f.evidence}
	raw, err := c.client.do(c.ctx, http.MethodPost, "/api/v1/fulfilments/"+url.PathEscape(c.pos[0])+"/resolve", req, &res)
	if err == nil {
		c.out.print(raw, func(w io.Writer) { printMoved(w, res.Fulfilment) })
	}
	return err
}

func reopen(c opsCall) error {
	var res web.ResolveAnswer
	req := web.ReopenRequest{Attempt: c.f.attempt, Reason: c.f.reason, Evidence: c.f.evidence}
	raw, err := c.client.do(c.ctx, http.MethodPost, "/api/v1/fulfilments/"+url.PathEscape(c.pos[0])+"/reopen", req, &res)
	if err == nil {
		c.out.print(raw, func(w io.Writer) { printMoved(w, res.Fulfilment) })
	}
	return err
}

// bulk posts the ids given, or with --listed the first page of fulfilments
// in state of that the filters list, to path.
func bulk(of, path string) func(c opsCall) error {
	return func(c opsCall) error {
		ids := c.pos
		if c.f.listed {
			var list web.FulfilmentList
			if _, err := c.client.do(c.ctx, http.MethodGet, "/api/v1/fulfilments?"+listQuery(c.f.filters, map[string]string{"state": of}, 100).Encode(), nil, &list); err != nil {
				return err
			}
			for _, f := range list.Fulfilments {
				ids = append(ids, f.ID)
			}
			if len(ids) == 0 {
				fmt.Fprintf(c.stdout, "no %s fulfilment matches\n", of)
				return nil
			}
		}
		var a web.BulkAnswer
		raw, err := c.client.do(c.ctx, http.MethodPost, path, web.BulkRequest{IDs: ids}, &a)
		if err == nil {
			c.out.print(raw, func(w io.Writer) { printBulk(w, a) })
		}
		return err
	}
}

func listEvents(c opsCall) error {
	var list web.EventList
	raw, err := c.client.do(c.ctx, http.MethodGet, "/api/v1/events?"+listQuery(c.f.filters, map[string]string{"cursor": c.f.cursor}, c.f.limit).Encode(), nil, &list)
	if err == nil {
		c.out.print(raw, func(w io.Writer) { printEvents(w, list) })
	}
	return err
}

func showEvent(c opsCall) error {
	var d web.EventDetail
	raw, err := c.client.do(c.ctx, http.MethodGet, "/api/v1/events/"+url.PathEscape(c.pos[0])+"/"+url.PathEscape(c.pos[1]), nil, &d)
	if err == nil {
		c.out.print(raw, func(w io.Writer) { printEvent(w, d) })
	}
	return err
}

func replay(c opsCall) error {
	var a web.ReplayAnswer
	raw, err := c.client.do(c.ctx, http.MethodPost, "/api/v1/events/"+url.PathEscape(c.pos[0])+"/"+url.PathEscape(c.pos[1])+"/replay", web.ReplayRequest{}, &a)
	if err == nil {
		c.out.print(raw, func(w io.Writer) {
			fmt.Fprintf(w, "%s", strings.ReplaceAll(a.Result, "_", " "))
			if a.FulfilmentID != "" {
				fmt.Fprintf(w, ": %s", a.FulfilmentID)
			}
			fmt.Fprintln(w)
		})
	}
	return err
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
	tw := Table(w)
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
	tw := Table(w)
	fmt.Fprintln(tw, "FULFILMENT\tRESULT\tNEW FULFILMENT")
	for _, r := range a.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.ID, r.Result, cmp.Or(r.FulfilmentID, "-"))
	}
	_ = tw.Flush()
}

func printEvents(w io.Writer, list web.EventList) {
	tw := Table(w)
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
	tw := Table(w)
	fmt.Fprintln(tw, "WHEN\tFROM\tTO\tATTEMPT\tACTOR\tREASON\tEVIDENCE")
	for _, t := range d.Transitions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", t.CreatedAt.UTC().Format(time.RFC3339), cmp.Or(t.From, "-"), t.To, t.Attempt, t.Actor, t.Reason, string(t.Evidence))
	}
	_ = tw.Flush()
	if len(d.Checks) > 0 {
		fmt.Fprintln(w, "\nlookups:")
		tw := Table(w)
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

// ParseInterspersed parses args with fs, flags before, between or after
// positional arguments, and returns the positional ones.
func ParseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
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

// IsHelp reports whether arg asks for help.
func IsHelp(arg string) bool {
	return arg == "-h" || arg == "--help" || arg == "-help" || arg == "help"
}

// UsageExit is the exit code for a flag parse error: 0 for -h, else 2 (the
// flag package has printed the usage either way).
func UsageExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	return ExitUsage
}

// Fail reports err as the command's failure and returns code, for
// `return Fail(stderr, ExitFailure, err)`.
func Fail(stderr io.Writer, code int, err error) int {
	fmt.Fprintf(stderr, "guardian: %v\n", err)
	return code
}

// Table returns the writer every listing aligns its columns with.
func Table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }
