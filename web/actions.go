package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/guardian-pay/guardian/app/actions"
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
