package web

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/state"
)

// BulkRequest is the body of POST /api/v1/fulfilments/retry and
// POST /api/v1/fulfilments/recheck: the fulfilments to act on, 1 to 100.
type BulkRequest struct {
	IDs []string `json:"ids"`
}

// BulkAnswer says what a bulk action did to each fulfilment it named.
type BulkAnswer struct {
	Results []BulkItem `json:"results"`
}

// BulkItem is one fulfilment's result. Result is, for a retry, retried,
// payment_held, not_failed or not_found; for a re-check, fulfilled,
// redispatched, cancelled, failed, in_progress, cannot_tell, moved, within_grace,
// not_parked, not_reached or not_found; for either, error when that
// fulfilment's change could not be written (nothing changed for it; the
// others' results stand).
type BulkItem struct {
	ID     string `json:"id"`
	Result string `json:"result"`
	// Error says why, when Result is error.
	Error string `json:"error,omitempty"`
	// FulfilmentID is the fulfilment a retry created.
	FulfilmentID string `json:"fulfilment_id,omitempty"`
	// ActionName is the action of the fulfilment named, where it was found.
	ActionName string `json:"action_name,omitempty"`
}

// bulkAction names a bulk action and what applies it.
type bulkAction struct {
	// Name is "retry" or "recheck".
	Name string
	// Of is the state it acts on.
	Of state.State
	// Verb and Effect describe it to the operator who confirms it.
	Verb, Effect string
	// NeedsLookup: the action asks the connector's lookup, so it is offered
	// only where one is configured.
	NeedsLookup bool
	apply       func(*fulfilment.Service, context.Context, []string, string) ([]fulfilment.BulkResult, error)
}

var bulkActions = map[string]bulkAction{
	"retry": {
		Name: "retry", Of: state.Failed, Verb: "Retry",
		Effect: "Each failed payment gets a new fulfilment and dispatch, unless another fulfilment already holds the payment. The failed rows stay as they are.",
		apply:  (*fulfilment.Service).Retry,
	},
	"recheck": {
		Name: "recheck", Of: state.NeedsReconciliation, Verb: "Re-check", NeedsLookup: true,
		Effect: "Each parked fulfilment is looked up at the receiver now, whatever its backoff: done resolves it to fulfilled, not done dispatches it again under the same key, cannot tell leaves it parked. Rows parked within the grace are left alone.",
		apply:  (*fulfilment.Service).Recheck,
	},
}

// bulkTimeout bounds a bulk action's request, inside the server's write
// timeout: a re-check starts no lookup it could not finish by then.
const bulkTimeout = 25 * time.Second

func (s *Server) apiRetry(c echo.Context) error   { return s.apiBulk(c, bulkActions["retry"]) }
func (s *Server) apiRecheck(c echo.Context) error { return s.apiBulk(c, bulkActions["recheck"]) }

func (s *Server) apiBulk(c echo.Context, a bulkAction) error {
	var req BulkRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	out, err := s.bulk(c, a, fulfilmentIDs(req.IDs))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

// bulk applies a to ids as the request's operator; the API and the
// dashboard share it.
func (s *Server) bulk(c echo.Context, a bulkAction, ids []string) (BulkAnswer, error) {
	ctx, cancel := context.WithTimeout(c.Request().Context(), bulkTimeout)
	defer cancel()
	rs, err := a.apply(s.cfg.Service, ctx, ids, actor(c))
	switch {
	case errors.Is(err, fulfilment.ErrInvalid):
		return BulkAnswer{}, &HTTPError{Code: http.StatusBadRequest, Msg: err.Error()}
	case errors.Is(err, fulfilment.ErrNoLookup):
		return BulkAnswer{}, &HTTPError{Code: http.StatusConflict, Msg: err.Error()}
	case err != nil:
		return BulkAnswer{}, storageError(err)
	}
	out := BulkAnswer{Results: make([]BulkItem, len(rs))}
	for i, r := range rs {
		out.Results[i] = BulkItem{ID: r.ID, Result: string(r.Verdict), FulfilmentID: r.FulfilmentID, ActionName: r.ActionName}
		if r.Verdict == fulfilment.BulkFailed {
			out.Results[i].Error = "not changed: storage unavailable; try this one again"
		}
	}
	return out, nil
}

// bulkPurpose binds the dashboard's bulk confirmations.
const bulkPurpose = "dashboard-bulk"

// bulkIntent is what a bulk confirmation token is bound to: exactly the
// fulfilments the operator saw.
type bulkIntent struct {
	Action     string   `json:"action"`
	IDs        []string `json:"ids"`
	Credential string   `json:"credential"`
}

// handleBulkAsk asks for confirmation of a bulk action on the fulfilments a
// list page showed, with a single-use token bound to the action, those ids
// and the operator.
func (s *Server) handleBulkAsk(c echo.Context) error {
	sess := c.Get("session").(session)
	a, ok := bulkActions[c.FormValue("action")]
	if !ok {
		return &HTTPError{Code: http.StatusBadRequest, Msg: "unknown bulk action"}
	}
	ids := slices.Compact(slices.Sorted(slices.Values(fulfilmentIDs(c.Request().Form["id"]))))
	if len(ids) == 0 || len(ids) > fulfilment.MaxBulk {
		return &HTTPError{Code: http.StatusBadRequest, Msg: fulfilment.ErrTooMany.Error()}
	}
	token, err := s.askConfirmation(c.Request().Context(), bulkPurpose, bulkIntent{Action: a.Name, IDs: ids, Credential: sess.Credential})
	if err != nil {
		return storageError(err)
	}
	return s.render(c, http.StatusOK, "bulk", page{Title: "Confirm: " + a.Verb, Data: map[string]any{
		"Action": a, "IDs": ids, "Token": token,
	}})
}

// handleBulkConfirm redeems a bulk confirmation and applies exactly what it
// is bound to, once, then shows each fulfilment's result.
func (s *Server) handleBulkConfirm(c echo.Context) error {
	sess := c.Get("session").(session)
	var intent bulkIntent
	switch err := s.redeemConfirmation(c.Request().Context(), bulkPurpose, c.FormValue("token"), sess.Credential, &intent); {
	case errors.Is(err, errConfirmationGone):
		return s.render(c, http.StatusGone, "bulk", page{Title: "Bulk action", Error: "This confirmation was already used or has expired. Nothing was changed by it."})
	case errors.Is(err, errConfirmationNotYours):
		return s.render(c, http.StatusBadRequest, "bulk", page{Title: "Bulk action", Error: "This confirmation belongs to another operator. Nothing was changed."})
	case err != nil:
		return storageError(err)
	}
	a, ok := bulkActions[intent.Action]
	if !ok {
		return &HTTPError{Code: http.StatusBadRequest, Msg: "unknown bulk action"}
	}
	out, err := s.bulk(c, a, intent.IDs)
	if err != nil {
		return err
	}
	return s.render(c, http.StatusOK, "bulk", page{Title: a.Verb + ": done", Data: map[string]any{"Action": a, "Results": out.Results}})
}
