// The dashboard's pages: overview, queue, lists, search, a fulfilment and
// an event, and the forms that change them (each behind a confirmation,
// confirm.go). Rendering is render.go's; sign-in is session.go's.

package web

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

// resolvePurpose binds the dashboard's confirmation tokens.
const resolvePurpose = "dashboard-resolve"

// overview is the overview page's data.
type overview struct {
	Stats           StatsAnswer
	States          []stateCount
	Minutes         []minuteCounts
	Totals          minuteCounts
	DispatchOutcome map[string]int
	Chart           chart
	// Unmapped counts events flagged as paid but naming no payment
	// Guardian can read: each waits for an operator.
	Unmapped int
	// Providers are the served providers' deliveries over the last hour,
	// by name: one silent where traffic was expected is a misconfigured
	// endpoint or secret.
	Providers []providerActivity
}

type stateCount struct {
	State string
	Count int
}

type chart struct {
	Bars   []bar
	Max    int
	Width  int
	Height int
}

type bar struct {
	X, W               int
	NewH, DupRH, DupPH int
	NewY, DupRY, DupPY int
	Label              string
}

func buildChart(ms []minuteCounts) chart {
	const height, barW = 120, 8
	ch := chart{Width: len(ms) * (barW + 2), Height: height}
	for _, m := range ms {
		ch.Max = max(ch.Max, m.New+m.DupRedis+m.DupPG)
	}
	scale := func(n int) int {
		if ch.Max == 0 {
			return 0
		}
		return n * (height - 10) / ch.Max
	}
	for i, m := range ms {
		b := bar{X: i * (barW + 2), W: barW, NewH: scale(m.New), DupRH: scale(m.DupRedis), DupPH: scale(m.DupPG)}
		b.NewY = height - b.NewH
		b.DupPY = b.NewY - b.DupPH
		b.DupRY = b.DupPY - b.DupRH
		b.Label = fmt.Sprintf("%s: %d new, %d duplicates (Redis), %d duplicates (Postgres)",
			time.Unix(m.minute*60, 0).UTC().Format("15:04"), m.New, m.DupRedis, m.DupPG)
		ch.Bars = append(ch.Bars, b)
	}
	return ch
}

func (s *Server) handleOverview(c echo.Context) error {
	st, err := s.stats(c)
	if err != nil {
		return err
	}
	outcomes, err := db.DispatchOutcomesSince(c.Request().Context(), s.cfg.Store.Pool(), s.now().Add(-time.Hour))
	if err != nil {
		return storageError(err)
	}
	unmapped, err := db.CountUnmapped(c.Request().Context(), s.cfg.Store.Pool())
	if err != nil {
		return storageError(err)
	}
	o := overview{Stats: st, Minutes: s.activity.lastHour(s.now()), DispatchOutcome: outcomes, Unmapped: unmapped}
	for _, name := range state.All {
		o.States = append(o.States, stateCount{State: string(name), Count: st.ByState[string(name)]})
	}
	for _, m := range o.Minutes {
		o.Totals = o.Totals.plus(m)
	}
	o.Providers = s.activity.providerTotals(s.now(), sortedNames(s.providers))
	o.Chart = buildChart(o.Minutes)
	return s.render(c, http.StatusOK, "overview", page{Title: "Overview", Data: o})
}

func (s *Server) handleQueue(c echo.Context) error {
	fs, next, err := db.ListFulfilments(c.Request().Context(), s.cfg.Store.Pool(), db.ListParams{
		State: state.NeedsReconciliation, Limit: 100, Cursor: c.QueryParam("cursor"), Action: c.QueryParam("action"),
	})
	if errors.Is(err, db.ErrBadCursor) {
		return &HTTPError{Code: http.StatusBadRequest, Msg: "invalid cursor"}
	}
	if err != nil {
		return storageError(err)
	}
	type row struct {
		F           db.Fulfilment
		Transitions []db.Transition
		Checks      []db.Check
	}
	ids := make([]string, len(fs))
	for i, f := range fs {
		ids[i] = f.ID
	}
	// Two queries for the whole page, not two per row.
	ts, err := db.Transitions(c.Request().Context(), s.cfg.Store.Pool(), ids...)
	if err != nil {
		return storageError(err)
	}
	cs, err := db.Checks(c.Request().Context(), s.cfg.Store.Pool(), ids...)
	if err != nil {
		return storageError(err)
	}
	rows := make([]row, len(fs))
	at := map[string]*row{}
	for i, f := range fs {
		rows[i].F = f
		at[f.ID] = &rows[i]
	}
	for _, t := range ts {
		at[t.FulfilmentID].Transitions = append(at[t.FulfilmentID].Transitions, t)
	}
	for _, c := range cs {
		at[c.FulfilmentID].Checks = append(at[c.FulfilmentID].Checks, c)
	}
	awaiting, err := s.awaiting(c)
	if err != nil {
		return err
	}
	return s.render(c, http.StatusOK, "queue", page{Title: "Reconciliation queue", Data: map[string]any{
		"Rows": rows, "Next": next, "Action": c.QueryParam("action"), "Actions": s.cfg.Service.Actions().Names(), "Awaiting": awaiting}})
}

// searchLimit caps each kind of match the search page shows.
const searchLimit = 50

// handleSearch finds fulfilments and events by a prefix of a payment or
// event id (pi_demo finds pi_demo_0622f7f2), or opens a fulfilment by its id.
func (s *Server) handleSearch(c echo.Context) error {
	q := strings.TrimSpace(c.QueryParam("q"))
	if q == "" {
		return s.render(c, http.StatusOK, "search", page{Title: "Search"})
	}
	if db.ValidUUID(q) {
		return c.Redirect(http.StatusSeeOther, "/fulfilments/"+url.PathEscape(fulfilmentID(q)))
	}
	if len(q) > 255 {
		return &HTTPError{Code: http.StatusBadRequest, Msg: "search is longer than 255 bytes"}
	}
	ctx, pool := c.Request().Context(), s.cfg.Store.Pool()
	var fs []db.Fulfilment
	var es []db.Event
	more := false
	for _, by := range []struct{ payment, event string }{{payment: q}, {event: q}} {
		f, nextF, err := db.ListFulfilments(ctx, pool, db.ListParams{PaymentPrefix: by.payment, EventPrefix: by.event, Limit: searchLimit})
		if err != nil {
			return storageError(err)
		}
		e, nextE, err := db.ListEvents(ctx, pool, db.EventListParams{PaymentPrefix: by.payment, EventPrefix: by.event, Limit: searchLimit})
		if err != nil {
			return storageError(err)
		}
		fs, es = append(fs, f...), append(es, e...)
		more = more || nextF != "" || nextE != ""
	}
	return s.render(c, http.StatusOK, "search", page{Title: "Search", Data: map[string]any{
		"Q": q, "Fulfilments": uniqueBy(fs, func(f db.Fulfilment) string { return f.ID }),
		"Events": uniqueBy(es, func(e db.Event) string { return e.Provider + "\x00" + e.EventID }),
		"More":   more,
	}})
}

// uniqueBy drops later elements whose key was seen, keeping order.
func uniqueBy[T any](in []T, key func(T) string) []T {
	seen := make(map[string]bool, len(in))
	out := in[:0:0]
	for _, v := range in {
		if k := key(v); !seen[k] {
			seen[k] = true
			out = append(out, v)
		}
	}
	return out
}

// listKeys are the query parameters a list page keeps from page to page.
var listKeys = []string{"state", "action", "provider", "type", "payment_prefix", "event_prefix", "since", "until", "unmapped"}

// listPage is what the list pages share: the filters the query set, the
// providers to choose from, and the next page's address.
func (s *Server) listPage(c echo.Context, path, nextCursor string) map[string]any {
	filters := url.Values{}
	for _, k := range listKeys {
		if v := c.QueryParam(k); v != "" {
			filters.Set(k, v)
		}
	}
	var providers []string
	for _, p := range s.cfg.Providers {
		providers = append(providers, p.Name())
	}
	next := ""
	if nextCursor != "" {
		with := url.Values{"cursor": {nextCursor}}
		for k, v := range filters {
			with[k] = v
		}
		next = path + "?" + with.Encode()
	}
	return map[string]any{"Providers": providers, "Actions": s.cfg.Service.Actions().Names(), "F": filters, "Query": filters.Encode(), "Next": next}
}

// handleListPage lists fulfilments by state, provider, event type, id
// prefix and time, paged; each overview tile opens it for its state. A page
// of failed or parked fulfilments offers its bulk action.
func (s *Server) handleListPage(c echo.Context) error {
	list, err := s.listFulfilments(c)
	if err != nil {
		return err
	}
	d := s.listPage(c, "/fulfilments", list.NextCursor)
	d["List"], d["States"] = list, state.All
	st := state.State(c.QueryParam("state"))
	for _, a := range bulkActions {
		if a.Of != st || len(list.Fulfilments) == 0 || a.NeedsLookup && !s.cfg.Service.Reconciles() {
			continue // nothing to act on, or no lookup to re-check with
		}
		if len(list.Fulfilments) > fulfilment.MaxBulk {
			d["BulkTooMany"] = fmt.Sprintf("%s acts on at most %d fulfilments at a time: list %d or fewer per page (limit=%d).", a.Verb, fulfilment.MaxBulk, fulfilment.MaxBulk, fulfilment.MaxBulk)
			continue
		}
		d["Bulk"] = a
	}
	return s.render(c, http.StatusOK, "list", page{Title: "Fulfilments", Data: d})
}

func (s *Server) handleEventsCSV(c echo.Context) error {
	list, err := s.listEvents(c)
	if err != nil {
		return err
	}
	return writeEventsCSV(c, list)
}

// handleEventsPage lists stored events newest first, filtered like the
// fulfilment list.
func (s *Server) handleEventsPage(c echo.Context) error {
	list, err := s.listEvents(c)
	if err != nil {
		return err
	}
	d := s.listPage(c, "/events", list.NextCursor)
	d["List"] = list
	return s.render(c, http.StatusOK, "events", page{Title: "Events", Data: d})
}

func (s *Server) handleListCSV(c echo.Context) error {
	list, err := s.listFulfilments(c)
	if err != nil {
		return err
	}
	return writeFulfilmentsCSV(c, list)
}

func (s *Server) handleFulfilmentPage(c echo.Context) error {
	d, err := s.fulfilmentDetail(c, fulfilmentID(c.Param("id")))
	if err != nil {
		return err
	}
	p := page{Title: "Fulfilment " + d.Fulfilment.ID, Data: s.fulfilmentPage(d)}
	if c.QueryParam("resolved") != "" {
		p.Flash = "Resolved: the fulfilment is now " + string(d.Fulfilment.State) + ". The audit entry is at the end of the timeline."
	}
	return s.render(c, http.StatusOK, "fulfilment", p)
}

// fulfilmentPage is a fulfilment's page: its detail, and where each of
// its purchase's actions is performed (by action name; an action no
// longer configured has none).
type fulfilmentPage struct {
	FulfilmentDetail
	Receivers map[string]string
}

// fulfilmentPage is d as its page shows it.
func (s *Server) fulfilmentPage(d FulfilmentDetail) fulfilmentPage {
	receivers := map[string]string{}
	for _, a := range s.cfg.Service.Actions().Actions {
		receivers[a.Name] = a.Receiver.URL
	}
	return fulfilmentPage{FulfilmentDetail: d, Receivers: receivers}
}

// resolveIntent is what a confirmation token is bound to.
type resolveIntent struct {
	FulfilmentID string `json:"fulfilment_id"`
	// Attempt is the attempt the operator saw on the page they decided on.
	Attempt    int    `json:"attempt"`
	Resolution string `json:"resolution"`
	Reason     string `json:"reason"`
	Evidence   string `json:"evidence"`
	// Credential is the session's credential: only its holder may confirm.
	Credential string `json:"credential"`
}

// handleResolveAsk checks a resolution form and asks for confirmation with
// a single-use token bound to exactly what was asked.
func (s *Server) handleResolveAsk(c echo.Context) error {
	sess := c.Get("session").(session)
	attempt, _ := strconv.Atoi(c.FormValue("attempt"))
	intent := resolveIntent{
		FulfilmentID: fulfilmentID(c.Param("id")), Attempt: attempt, Resolution: c.FormValue("resolution"),
		Reason: strings.TrimSpace(c.FormValue("reason")), Evidence: strings.TrimSpace(c.FormValue("evidence")), Credential: sess.Credential,
	}
	d, err := s.fulfilmentDetail(c, intent.FulfilmentID)
	if err != nil {
		return err
	}
	res := fulfilment.Resolution{FulfilmentID: intent.FulfilmentID, Attempt: intent.Attempt, To: state.State(intent.Resolution), Operator: sess.Operator, Reason: intent.Reason, Evidence: intent.Evidence}
	if err := res.Validate(); err != nil {
		return s.render(c, http.StatusBadRequest, "fulfilment", page{Title: "Fulfilment " + d.Fulfilment.ID, Data: s.fulfilmentPage(d), Error: err.Error()})
	}
	token, err := s.askConfirmation(c.Request().Context(), resolvePurpose, intent)
	if err != nil {
		return storageError(err)
	}
	return s.render(c, http.StatusOK, "confirm", page{Title: "Confirm resolution", Data: map[string]any{"Intent": intent, "Token": token, "F": d.Fulfilment}})
}

// handleResolveConfirm redeems the confirmation token and applies exactly
// the resolution it is bound to, once.
func (s *Server) handleResolveConfirm(c echo.Context) error {
	sess := c.Get("session").(session)
	id := fulfilmentID(c.Param("id"))
	var intent resolveIntent
	err := s.redeemConfirmation(c.Request().Context(), resolvePurpose, c.FormValue("token"), sess.Credential, &intent)
	switch {
	case errors.Is(err, errConfirmationGone):
		return s.renderFulfilmentError(c, id, http.StatusGone, "This confirmation was already used or has expired. Nothing was changed by it; check the timeline below.")
	case errors.Is(err, errConfirmationNotYours) || err == nil && intent.FulfilmentID != id:
		return s.renderFulfilmentError(c, id, http.StatusBadRequest, "This confirmation belongs to another fulfilment or operator. Nothing was changed.")
	case err != nil:
		return storageError(err)
	}
	_, err = s.resolve(c, id, ResolveRequest{Resolution: intent.Resolution, Attempt: intent.Attempt, Reason: intent.Reason, Evidence: intent.Evidence})
	var conflict *conflictError
	switch {
	case errors.As(err, &conflict) && errors.Is(err, fulfilment.ErrInFlight):
		return s.renderFulfilmentError(c, id, http.StatusConflict,
			"The parked call could still be running at the receiver: dispatching again is refused until its timeout has passed. Nothing was changed.")
	case errors.As(err, &conflict):
		return s.renderFulfilmentError(c, id, http.StatusConflict,
			fmt.Sprintf("This fulfilment moved since you looked at it: it is now %s at attempt %d, and you decided about attempt %d. Your resolution was not applied.", conflict.state, conflict.attempt, intent.Attempt))
	}
	if err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/fulfilments/"+url.PathEscape(id)+"?resolved=1")
}

func (s *Server) renderFulfilmentError(c echo.Context, id string, code int, msg string) error {
	d, err := s.fulfilmentDetail(c, id)
	if err != nil {
		return err
	}
	return s.render(c, code, "fulfilment", page{Title: "Fulfilment " + id, Data: s.fulfilmentPage(d), Error: msg})
}

func (s *Server) handleEventPage(c echo.Context) error {
	d, err := s.eventDetail(c, c.Param("provider"), c.Param("event_id"))
	if err != nil {
		return err
	}
	p := page{Title: "Event " + d.Event.EventID, Data: d}
	if r := c.QueryParam("replayed"); r != "" {
		p.Flash = "Replay: " + strings.ReplaceAll(r, "_", " ") + "."
	}
	return s.render(c, http.StatusOK, "event", p)
}

func (s *Server) handleReplayForm(c echo.Context) error {
	a, err := s.replay(c, c.Param("provider"), c.Param("event_id"))
	if err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/events/"+url.PathEscape(c.Param("provider"))+"/"+url.PathEscape(c.Param("event_id"))+"?replayed="+url.QueryEscape(a.Result))
}
