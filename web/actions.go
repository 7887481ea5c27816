package web

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/guardian-pay/guardian/app/actions"
	"github.com/guardian-pay/guardian/db"
)

// ActionsAnswer is the deployment's actions and routes, read-only: what
// purchases pay for, where each action is performed and what takes it
// back. Secrets are never part of it, only the variable they are read
// from.
type ActionsAnswer struct {
	Source  string          `json:"source,omitempty"`
	Digest  string          `json:"digest"`
	Actions []ActionView    `json:"actions"`
	Routes  []actions.Route `json:"routes"`
}

// ActionView is one action as operators see it.
type ActionView struct {
	Name           string   `json:"name"`
	Description    string   `json:"description,omitempty"`
	URL            string   `json:"url"`
	LookupURL      string   `json:"lookup_url,omitempty"`
	SecretEnv      string   `json:"secret_env,omitempty"`
	TimeoutSeconds float64  `json:"timeout_seconds"`
	TakeBack       []string `json:"take_back"`
	Line           int      `json:"line,omitempty"`
}

// ActionsOf is set as the API shows it.
func ActionsOf(set *actions.Set) ActionsAnswer {
	out := ActionsAnswer{Source: set.Source, Digest: set.Digest, Actions: []ActionView{}, Routes: set.Routes}
	for _, a := range set.Actions {
		v := ActionView{Name: a.Name, Description: a.Description, URL: a.Receiver.URL, LookupURL: a.Receiver.LookupURL,
			SecretEnv: a.Receiver.SecretEnv, TimeoutSeconds: a.Receiver.Timeout.Seconds(), TakeBack: []string{}, Line: a.Line}
		for _, r := range a.TakeBack {
			v.TakeBack = append(v.TakeBack, string(r))
		}
		out.Actions = append(out.Actions, v)
	}
	if out.Routes == nil {
		out.Routes = []actions.Route{}
	}
	return out
}

// apiActions answers GET /api/v1/actions.
func (s *Server) apiActions(c echo.Context) error {
	return c.JSON(http.StatusOK, ActionsOf(s.cfg.Service.Actions()))
}

// AwaitingAnswer lists the purchases awaiting their items from their
// provider's API, longest waiting first: none of their actions is made
// until a fetch succeeds (docs/actions.md, "Routes that need what was
// bought").
type AwaitingAnswer struct {
	Total     int            `json:"total"`
	Purchases []AwaitingView `json:"purchases"`
}

// AwaitingView is one purchase awaiting its items.
type AwaitingView struct {
	Provider  string `json:"provider"`
	PaymentID string `json:"payment_id"`
	// ItemsOf is the provider's object whose items are fetched (a
	// Checkout Session's id).
	ItemsOf     string     `json:"items_of"`
	Since       time.Time  `json:"since"`
	Attempts    int        `json:"attempts"`
	LastError   string     `json:"last_error,omitempty"`
	LastTriedAt *time.Time `json:"last_tried_at,omitempty"`
}

// awaitingShown caps the purchases the API and the queue list.
const awaitingShown = 100

// awaiting reads the purchases awaiting their items.
func (s *Server) awaiting(c echo.Context) (AwaitingAnswer, error) {
	list, total, err := db.PurchasesAwaiting(c.Request().Context(), s.cfg.Store.Pool(), awaitingShown)
	if err != nil {
		return AwaitingAnswer{}, storageError(err)
	}
	out := AwaitingAnswer{Total: total, Purchases: []AwaitingView{}}
	for _, a := range list {
		out.Purchases = append(out.Purchases, AwaitingView{Provider: a.Provider, PaymentID: a.PaymentID, ItemsOf: a.Ref,
			Since: a.Since, Attempts: a.Attempts, LastError: a.Error, LastTriedAt: a.TriedAt})
	}
	return out, nil
}

// apiAwaiting answers GET /api/v1/purchases/awaiting.
func (s *Server) apiAwaiting(c echo.Context) error {
	a, err := s.awaiting(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, a)
}
