package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/guardian-pay/guardian/app/actions"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

// mountAPI registers the operator API under /api/v1, every route behind
// the admin token.
func (s *Server) mountAPI() {
	g := s.echo.Group("/api/v1", s.requireOperator)
	g.GET("/fulfilments", s.apiListFulfilments)
	g.GET("/fulfilments/:id", s.apiGetFulfilment)
	g.POST("/fulfilments/:id/resolve", s.apiResolve)
	g.POST("/fulfilments/:id/reopen", s.apiReopen)
	g.POST("/fulfilments/retry", s.apiRetry)
	g.POST("/fulfilments/recheck", s.apiRecheck)
	g.GET("/events", s.apiListEvents)
	g.GET("/events/:provider/:event_id", s.apiGetEvent)
	g.POST("/events/:provider/:event_id/replay", s.apiReplay)
	g.GET("/stats", s.apiStats)
	g.GET("/actions", s.apiActions)
	g.GET("/purchases/awaiting", s.apiAwaiting)
	g.GET("/subscriptions", s.apiSubscriptions)
	g.GET("/subscriptions/:provider/:subscription_id", s.apiGetSubscription)
	g.GET("/refused", s.apiRefused)
	g.GET("/openapi.json", s.apiOpenAPI)
}

// FulfilmentList is the answer to GET /api/v1/fulfilments.
type FulfilmentList struct {
	Fulfilments []Fulfilment `json:"fulfilments"`
	// NextCursor continues the listing; empty on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

func (s *Server) apiListFulfilments(c echo.Context) error {
	list, err := s.listFulfilments(c)
	if err != nil {
		return err
	}
	if c.QueryParam("format") == "csv" {
		return writeFulfilmentsCSV(c, list)
	}
	return c.JSON(http.StatusOK, list)
}

// listFilter is what every listing's query may say: the filters events
// and fulfilments share, and the page.
type listFilter struct {
	Provider, Type             string
	PaymentPrefix, EventPrefix string
	Since, Until               time.Time
	Limit                      int
	Cursor                     string
}

// parseListFilter reads and checks a listing's shared query parameters.
func parseListFilter(q url.Values) (listFilter, error) {
	f := listFilter{
		Provider: q.Get("provider"), Type: q.Get("type"), PaymentPrefix: q.Get("payment_prefix"),
		EventPrefix: q.Get("event_prefix"), Cursor: q.Get("cursor"),
	}
	for _, name := range []string{"type", "payment_prefix", "event_prefix", "provider"} {
		if len(q.Get(name)) > 255 {
			return f, &HTTPError{Code: http.StatusBadRequest, Msg: name + " is longer than 255 bytes"}
		}
	}
	var err error
	for name, dst := range map[string]*time.Time{"since": &f.Since, "until": &f.Until} {
		if v := q.Get(name); v != "" {
			if *dst, err = time.Parse(time.RFC3339, v); err != nil {
				return f, &HTTPError{Code: http.StatusBadRequest, Msg: name + " must be an RFC 3339 time"}
			}
		}
	}
	if v := q.Get("limit"); v != "" {
		if f.Limit, err = strconv.Atoi(v); err != nil || f.Limit < 1 || f.Limit > 500 {
			return f, &HTTPError{Code: http.StatusBadRequest, Msg: "limit must be 1 to 500"}
		}
	}
	return f, nil
}

// listError maps a listing's storage error to its answer.
func listError(err error) error {
	if errors.Is(err, db.ErrBadCursor) {
		return &HTTPError{Code: http.StatusBadRequest, Msg: "invalid cursor"}
	}
	return storageError(err)
}

// listFulfilments reads the listing the request's query asks for; the API
// and the dashboard share it.
func (s *Server) listFulfilments(c echo.Context) (FulfilmentList, error) {
	q := c.QueryParams()
	lf, err := parseListFilter(q)
	if err != nil {
		return FulfilmentList{}, err
	}
	p := db.ListParams{
		State: state.State(q.Get("state")), Provider: lf.Provider, PaymentID: q.Get("payment_id"), EventID: q.Get("event_id"), Action: q.Get("action"),
		Type: lf.Type, PaymentPrefix: lf.PaymentPrefix, EventPrefix: lf.EventPrefix,
		Since: lf.Since, Until: lf.Until, Limit: lf.Limit, Cursor: lf.Cursor,
	}
	if p.Action != "" && !actions.ValidName(p.Action) {
		return FulfilmentList{}, &HTTPError{Code: http.StatusBadRequest, Msg: "action is not an action's name"}
	}
	if p.State != "" {
		if _, err := state.Parse(string(p.State)); err != nil {
			return FulfilmentList{}, &HTTPError{Code: http.StatusBadRequest, Msg: "unknown state"}
		}
	}
	fs, next, err := db.ListFulfilments(c.Request().Context(), s.cfg.Store.Pool(), p)
	if err != nil {
		return FulfilmentList{}, listError(err)
	}
	return FulfilmentList{Fulfilments: apiList(fs, apiFulfilment), NextCursor: next}, nil
}

// EventList is the answer to GET /api/v1/events: events newest first,
// without their payloads (GET /api/v1/events/{provider}/{event_id} has it).
type EventList struct {
	Events []Event `json:"events"`
	// NextCursor continues the listing; empty on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

func (s *Server) apiListEvents(c echo.Context) error {
	list, err := s.listEvents(c)
	if err != nil {
		return err
	}
	if c.QueryParam("format") == "csv" {
		return writeEventsCSV(c, list)
	}
	return c.JSON(http.StatusOK, list)
}

// listEvents reads the event listing the request's query asks for.
func (s *Server) listEvents(c echo.Context) (EventList, error) {
	q := c.QueryParams()
	lf, err := parseListFilter(q)
	if err != nil {
		return EventList{}, err
	}
	unmapped := false
	if v := q.Get("unmapped"); v != "" {
		if unmapped, err = strconv.ParseBool(v); err != nil {
			return EventList{}, &HTTPError{Code: http.StatusBadRequest, Msg: "unmapped: want true or false"}
		}
	}
	es, next, err := db.ListEvents(c.Request().Context(), s.cfg.Store.Pool(), db.EventListParams{
		Provider: lf.Provider, Type: lf.Type, PaymentPrefix: lf.PaymentPrefix, EventPrefix: lf.EventPrefix,
		Since: lf.Since, Until: lf.Until, Limit: lf.Limit, Cursor: lf.Cursor, Unmapped: unmapped,
	})
	if err != nil {
		return EventList{}, listError(err)
	}
	return EventList{Events: apiList(es, apiEvent), NextCursor: next}, nil
}

// FulfilmentDetail is the answer to GET /api/v1/fulfilments/{id}.
type FulfilmentDetail struct {
	Fulfilment  Fulfilment   `json:"fulfilment"`
	Event       Event        `json:"event"`
	Transitions []Transition `json:"transitions"`
	Checks      []Check      `json:"checks"`
	// Purchase is the payment's purchase: the actions it pays for, as
	// routed when it was first recorded as paid, and every row of the
	// payment, each action's and each direction's.
	Purchase PurchaseActions `json:"purchase"`
}

// PurchaseActions is what a purchase pays for and where each action
// stands.
type PurchaseActions struct {
	// Actions are the actions recorded with the purchase; absent for a
	// payment recorded before actions existed (its one action is fulfil).
	Actions     []string     `json:"actions,omitempty"`
	Fulfilments []Fulfilment `json:"fulfilments"`
}

func (s *Server) apiGetFulfilment(c echo.Context) error {
	d, err := s.fulfilmentDetail(c, fulfilmentID(c.Param("id")))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, d)
}

func (s *Server) fulfilmentDetail(c echo.Context, id string) (FulfilmentDetail, error) {
	if !db.ValidUUID(id) {
		return FulfilmentDetail{}, &HTTPError{Code: http.StatusNotFound, Msg: "fulfilment not found"}
	}
	h, err := db.FulfilmentHistory(c.Request().Context(), s.cfg.Store.Pool(), id)
	if errors.Is(err, db.ErrNotFound) {
		return FulfilmentDetail{}, &HTTPError{Code: http.StatusNotFound, Msg: "fulfilment not found"}
	}
	if err != nil {
		return FulfilmentDetail{}, storageError(err)
	}
	ctx, pool := c.Request().Context(), s.cfg.Store.Pool()
	rows, err := db.FulfilmentsByPayment(ctx, pool, h.Fulfilment.Provider, h.Fulfilment.PaymentID)
	if err != nil {
		return FulfilmentDetail{}, storageError(err)
	}
	routed, _, err := db.PurchaseActions(ctx, pool, db.Payment{Provider: h.Fulfilment.Provider, PaymentID: h.Fulfilment.PaymentID})
	if err != nil {
		return FulfilmentDetail{}, storageError(err)
	}
	return FulfilmentDetail{
		Fulfilment: apiFulfilment(h.Fulfilment), Event: apiEvent(h.Event),
		Transitions: apiList(h.Transitions, apiTransition), Checks: apiList(h.Checks, apiCheck),
		Purchase: PurchaseActions{Actions: routed, Fulfilments: apiList(rows, apiFulfilment)},
	}, nil
}

// ResolveRequest is the body of POST /api/v1/fulfilments/{id}/resolve.
type ResolveRequest struct {
	// Resolution is fulfilled, pending or cancelled.
	Resolution string `json:"resolution"`
	// Attempt is the attempt the decision is about, as the operator saw it
	// (the fulfilment's "attempt"): if the row moved on, the answer is 409.
	Attempt int    `json:"attempt"`
	Reason  string `json:"reason"`
	// Evidence is the fact behind the resolution; required for fulfilled
	// and pending.
	Evidence string `json:"evidence"`
}

// ResolveAnswer is the answer to a resolution that applied.
type ResolveAnswer struct {
	Fulfilment Fulfilment `json:"fulfilment"`
}

// ResolveConflict is the body of a 409 to a resolution or reopening.
type ResolveConflict struct {
	Error string `json:"error"`
	// State and Attempt are where the fulfilment stands now.
	State   string `json:"state"`
	Attempt int    `json:"attempt"`
}

func (s *Server) apiResolve(c echo.Context) error {
	var req ResolveRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	f, err := s.resolve(c, fulfilmentID(c.Param("id")), req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ResolveAnswer{Fulfilment: f})
}

// resolve applies a resolution and maps its errors to answers; the API and
// the dashboard share it.
func (s *Server) resolve(c echo.Context, id string, req ResolveRequest) (Fulfilment, error) {
	if !db.ValidUUID(id) {
		return Fulfilment{}, &HTTPError{Code: http.StatusNotFound, Msg: "fulfilment not found"}
	}
	f, err := s.cfg.Service.Resolve(c.Request().Context(), fulfilment.Resolution{
		FulfilmentID: id, Attempt: req.Attempt, To: state.State(req.Resolution), Operator: actor(c), Reason: req.Reason, Evidence: req.Evidence,
	})
	if err != nil {
		return Fulfilment{}, s.decisionError(c, id, err)
	}
	return apiFulfilment(f), nil
}

// ReopenRequest is the body of POST /api/v1/fulfilments/{id}/reopen: take a
// cancelled fulfilment back to needs_reconciliation, on the same row and
// Idempotency-Key.
type ReopenRequest struct {
	// Attempt is the cancelled row's attempt, as the operator saw it.
	Attempt int    `json:"attempt"`
	Reason  string `json:"reason"`
	// Evidence is what shows the cancel was wrong. Required.
	Evidence string `json:"evidence"`
}

func (s *Server) apiReopen(c echo.Context) error {
	var req ReopenRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	id := fulfilmentID(c.Param("id"))
	if !db.ValidUUID(id) {
		return &HTTPError{Code: http.StatusNotFound, Msg: "fulfilment not found"}
	}
	f, err := s.cfg.Service.Reopen(c.Request().Context(), fulfilment.Reopening{
		FulfilmentID: id, Attempt: req.Attempt, Operator: actor(c), Reason: req.Reason, Evidence: req.Evidence,
	})
	if err != nil {
		return s.decisionError(c, id, err)
	}
	return c.JSON(http.StatusOK, ResolveAnswer{Fulfilment: apiFulfilment(f)})
}

// decisionError maps an operator decision's error to its answer: 400 for
// a refused decision, 404, 409 when the row moved or its call could still be
// in flight, 503 otherwise.
func (s *Server) decisionError(c echo.Context, id string, err error) error {
	switch {
	case errors.Is(err, fulfilment.ErrInvalid):
		return &HTTPError{Code: http.StatusBadRequest, Msg: err.Error()}
	case errors.Is(err, db.ErrNotFound):
		return &HTTPError{Code: http.StatusNotFound, Msg: "fulfilment not found"}
	case errors.Is(err, fulfilment.ErrMoved), errors.Is(err, fulfilment.ErrInFlight):
		cur, gerr := db.GetFulfilment(c.Request().Context(), s.cfg.Store.Pool(), id)
		if gerr != nil {
			return storageError(gerr)
		}
		return &conflictError{err: err, state: string(cur.State), attempt: cur.Attempt}
	}
	return storageError(err)
}

// conflictError answers 409 with where the fulfilment stands.
type conflictError struct {
	err     error
	state   string
	attempt int
}

func (e *conflictError) Error() string {
	return fmt.Sprintf("%v (it is %s at attempt %d)", e.err, e.state, e.attempt)
}

// Unwrap lets callers tell a moved row from a call still in flight.
func (e *conflictError) Unwrap() error { return e.err }

func (e *conflictError) answer() (int, any) {
	return http.StatusConflict, ResolveConflict{Error: e.Error(), State: e.state, Attempt: e.attempt}
}

// EventDetail is the answer to GET /api/v1/events/{provider}/{event_id}.
type EventDetail struct {
	Event       Event        `json:"event"`
	Fulfilments []Fulfilment `json:"fulfilments"`
}

func (s *Server) apiGetEvent(c echo.Context) error {
	d, err := s.eventDetail(c, c.Param("provider"), c.Param("event_id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, d)
}

func (s *Server) eventDetail(c echo.Context, providerName, eventID string) (EventDetail, error) {
	ctx, pool := c.Request().Context(), s.cfg.Store.Pool()
	e, err := db.GetEvent(ctx, pool, providerName, eventID)
	if errors.Is(err, db.ErrNotFound) {
		return EventDetail{}, &HTTPError{Code: http.StatusNotFound, Msg: "event not found"}
	}
	if err != nil {
		return EventDetail{}, storageError(err)
	}
	fs, err := db.FulfilmentsByEvent(ctx, pool, e.ID)
	if err != nil {
		return EventDetail{}, storageError(err)
	}
	return EventDetail{Event: apiEvent(e), Fulfilments: apiList(fs, apiFulfilment)}, nil
}

// ReplayRequest is the body of POST /api/v1/events/{provider}/{event_id}/replay:
// empty, or an empty object. The audit actor is the credential's operator.
type ReplayRequest struct{}

// ReplayAnswer says what a replay did: "fulfilment_created" (with its id),
// "already_fulfilled_or_in_flight" (the payment has a live fulfilment: nothing
// done) or "not_fulfilling" (the event's type does not fulfil).
type ReplayAnswer struct {
	Result       string `json:"result"`
	FulfilmentID string `json:"fulfilment_id,omitempty"`
}

func (s *Server) apiReplay(c echo.Context) error {
	if c.Request().ContentLength != 0 {
		var req ReplayRequest
		if err := decodeBody(c, &req); err != nil {
			return err
		}
	}
	a, err := s.replay(c, c.Param("provider"), c.Param("event_id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, a)
}

func (s *Server) replay(c echo.Context, providerName, eventID string) (ReplayAnswer, error) {
	res, err := s.cfg.Service.Replay(c.Request().Context(), providerName, eventID, actor(c))
	if errors.Is(err, db.ErrNotFound) {
		return ReplayAnswer{}, &HTTPError{Code: http.StatusNotFound, Msg: "event not found"}
	}
	if errors.Is(err, db.ErrPruned) {
		return ReplayAnswer{}, &HTTPError{Code: http.StatusConflict, Msg: db.ErrPruned.Error() + ": it cannot be replayed"}
	}
	if err != nil {
		return ReplayAnswer{}, storageError(err)
	}
	switch {
	case !res.Fulfils:
		return ReplayAnswer{Result: "not_fulfilling"}, nil
	case res.FulfilmentID == "":
		return ReplayAnswer{Result: "already_fulfilled_or_in_flight"}, nil
	default:
		return ReplayAnswer{Result: "fulfilment_created", FulfilmentID: res.FulfilmentID}, nil
	}
}

// StatsAnswer is the answer to GET /api/v1/stats.
type StatsAnswer struct {
	ByState map[string]int `json:"by_state"`
	// OldestNeedsReconciliation is when the longest-waiting parked
	// fulfilment was parked, and OldestNeedsReconciliationAge how long ago in
	// seconds; both absent when none waits.
	OldestNeedsReconciliation    *time.Time `json:"oldest_needs_reconciliation,omitempty"`
	OldestNeedsReconciliationAge *float64   `json:"oldest_needs_reconciliation_age_seconds,omitempty"`
	// AwaitingItems counts the purchases awaiting their items from their
	// provider's API (GET /api/v1/purchases/awaiting), and
	// OldestAwaitingAge says how long the longest-waiting one has waited
	// in seconds; absent when none waits.
	AwaitingItems     int      `json:"awaiting_items"`
	OldestAwaitingAge *float64 `json:"oldest_awaiting_age_seconds,omitempty"`
}

func (s *Server) apiStats(c echo.Context) error {
	st, err := s.stats(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}

func (s *Server) stats(c echo.Context) (StatsAnswer, error) {
	st, err := s.counts.Read(c.Request().Context())
	if err != nil {
		return StatsAnswer{}, storageError(err)
	}
	a := StatsAnswer{ByState: map[string]int{}, OldestNeedsReconciliation: st.OldestNeedsReconciliation}
	for _, name := range state.All {
		a.ByState[string(name)] = st.ByState[name]
	}
	if st.OldestNeedsReconciliation != nil {
		age := s.now().Sub(*st.OldestNeedsReconciliation).Seconds()
		a.OldestNeedsReconciliationAge = &age
	}
	a.AwaitingItems = st.AwaitingItems
	if st.OldestAwaiting != nil {
		age := s.now().Sub(*st.OldestAwaiting).Seconds()
		a.OldestAwaitingAge = &age
	}
	return a, nil
}

func storageError(err error) error {
	return &HTTPError{Code: http.StatusServiceUnavailable, Msg: "storage unavailable, retry later", Err: err}
}

// maxAPIBody caps operator request bodies.
const maxAPIBody = 64 << 10

// decodeBody reads a JSON body strictly: one object, known fields only.
func decodeBody(c echo.Context, v any) error {
	dec := json.NewDecoder(io.LimitReader(c.Request().Body, maxAPIBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		// The decoder's message names the field or offset, never a value.
		return &HTTPError{Code: http.StatusBadRequest, Msg: "body must be a JSON object with known fields: " + err.Error(), Err: err}
	}
	if dec.More() {
		return &HTTPError{Code: http.StatusBadRequest, Msg: "body must hold one JSON object"}
	}
	return nil
}
