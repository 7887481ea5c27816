package web

import (
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/guardian-pay/guardian/db"
)

// SubscriptionView is a subscription as Guardian knows it (docs/design.md,
// "Subscriptions"): the purchase its start paid for, since when it is
// linked, and when it ended.
type SubscriptionView struct {
	Provider       string     `json:"provider"`
	SubscriptionID string     `json:"subscription_id"`
	PaymentID      string     `json:"payment_id"`
	State          string     `json:"state"`
	StartedAt      time.Time  `json:"started_at"`
	EndedAt        *time.Time `json:"ended_at,omitempty"`
	// Grants names its grants: the start's purchase, then each grant
	// again after a suspension.
	Grants []string `json:"grants"`
}

// SubscriptionList is the answer to GET /api/v1/subscriptions.
type SubscriptionList struct {
	Subscriptions []SubscriptionView `json:"subscriptions"`
	// EndsAwaitingStart counts stored ends of subscriptions whose start
	// Guardian has not linked: they take nothing back until it is.
	EndsAwaitingStart int `json:"ends_awaiting_start"`
}

// SubscriptionDetail is the answer to GET
// /api/v1/subscriptions/{provider}/{subscription_id}: the subscription,
// its renewals, its events (its purchase's, its grants again's, its
// reversals, ends, suspensions and resumptions, without payloads), and
// every fulfilment of its grants and renewals, each action's grant and
// take-back.
type SubscriptionDetail struct {
	Subscription SubscriptionView `json:"subscription"`
	// Renewals are its payments after the first, each its own purchase.
	Renewals    []string     `json:"renewals"`
	Events      []Event      `json:"events"`
	Fulfilments []Fulfilment `json:"fulfilments"`
}

// subscriptionsShown caps a listing.
const subscriptionsShown = 100

func apiSubscription(s db.Subscription) SubscriptionView {
	return SubscriptionView{Provider: s.Provider, SubscriptionID: s.SubscriptionID, PaymentID: s.PaymentID,
		State: s.State(), StartedAt: s.StartedAt, EndedAt: s.EndedAt, Grants: s.GrantIDs()}
}

func (s *Server) subscriptions(c echo.Context) (SubscriptionList, error) {
	st := c.QueryParam("state")
	if st != "" && !slices.Contains(db.SubscriptionStates, st) {
		return SubscriptionList{}, &HTTPError{Code: http.StatusBadRequest, Msg: "state must be active, suspended or ended"}
	}
	ctx, pool := c.Request().Context(), s.cfg.Store.Pool()
	list, err := db.ListSubscriptions(ctx, pool, st, subscriptionsShown)
	if err != nil {
		return SubscriptionList{}, storageError(err)
	}
	waiting, err := db.CountEndsAwaitingStart(ctx, pool)
	if err != nil {
		return SubscriptionList{}, storageError(err)
	}
	return SubscriptionList{Subscriptions: apiList(list, apiSubscription), EndsAwaitingStart: waiting}, nil
}

func (s *Server) subscriptionDetail(c echo.Context) (SubscriptionDetail, error) {
	ctx, pool := c.Request().Context(), s.cfg.Store.Pool()
	sub, err := db.GetSubscription(ctx, pool, c.Param("provider"), c.Param("subscription_id"))
	if errors.Is(err, db.ErrNotFound) {
		return SubscriptionDetail{}, &HTTPError{Code: http.StatusNotFound, Msg: "subscription not found"}
	}
	if err != nil {
		return SubscriptionDetail{}, storageError(err)
	}
	events, err := db.SubscriptionEvents(ctx, pool, sub)
	if err != nil {
		return SubscriptionDetail{}, storageError(err)
	}
	renewals, err := db.SubscriptionRenewals(ctx, pool, sub)
	if err != nil {
		return SubscriptionDetail{}, storageError(err)
	}
	var fs []db.Fulfilment
	for _, grant := range slices.Concat(sub.GrantIDs(), renewals) {
		rows, err := db.FulfilmentsByPayment(ctx, pool, sub.Provider, grant)
		if err != nil {
			return SubscriptionDetail{}, storageError(err)
		}
		fs = append(fs, rows...)
	}
	// Events without payloads, as in listings: each one's page has it.
	withoutPayload := func(e db.Event) Event { e.Payload = nil; return apiEvent(e) }
	return SubscriptionDetail{Subscription: apiSubscription(sub), Renewals: renewals, Events: apiList(events, withoutPayload), Fulfilments: apiList(fs, apiFulfilment)}, nil
}

// apiSubscriptions answers GET /api/v1/subscriptions?state=.
func (s *Server) apiSubscriptions(c echo.Context) error {
	list, err := s.subscriptions(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, list)
}

// apiGetSubscription answers GET /api/v1/subscriptions/{provider}/{id}.
func (s *Server) apiGetSubscription(c echo.Context) error {
	d, err := s.subscriptionDetail(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, d)
}

func (s *Server) handleSubscriptionsPage(c echo.Context) error {
	list, err := s.subscriptions(c)
	if err != nil {
		return err
	}
	return s.render(c, http.StatusOK, "subscriptions", page{Title: "Subscriptions", Data: map[string]any{"List": list, "State": c.QueryParam("state"), "States": db.SubscriptionStates}})
}

func (s *Server) handleSubscriptionPage(c echo.Context) error {
	d, err := s.subscriptionDetail(c)
	if err != nil {
		return err
	}
	return s.render(c, http.StatusOK, "subscription", page{Title: "Subscription " + d.Subscription.SubscriptionID, Data: d})
}
