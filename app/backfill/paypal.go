package backfill

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/guardian-pay/guardian/app/provider"
)

// PayPalConfig configures a PayPal backfill.
type PayPalConfig struct {
	// API is PayPal's API with the REST app's credentials, whose access
	// token may list webhook events (NewPayPalAPI). Required.
	API *PayPalAPI
	// Provider applies the payment rules.
	Provider *provider.PayPal
	Config
}

// payPalSource lists PayPal's GET /v1/notifications/webhooks-events.
type payPalSource struct {
	api      *PayPalAPI
	provider *provider.PayPal
	cfg      Config
}

// NewPayPal returns a backfill from PayPal's webhook events API.
func NewPayPal(cfg PayPalConfig) (*Backfill, error) {
	if cfg.API == nil || cfg.Provider == nil || cfg.Logger == nil {
		return nil, errors.New("backfill paypal: API, provider and logger are required")
	}
	return New(&payPalSource{api: cfg.API, provider: cfg.Provider, cfg: cfg.Config.withDefaults()}, cfg.Config)
}

// PayPalAPI is PayPal's REST API as Guardian reads it: an access token got
// with a REST app's credentials and kept until a minute before it expires,
// and the webhook events PayPal lists and shows. Safe for concurrent use.
type PayPalAPI struct {
	api              *apiClient
	clientID, secret string

	mu    sync.Mutex
	token string
	until time.Time
}

// NewPayPalAPI returns PayPal's API at apiURL (https://api-m.paypal.com
// when empty; the sandbox's, or a test's fake) with a REST app's
// credentials, which are never logged.
func NewPayPalAPI(clientID, secret, apiURL string) (*PayPalAPI, error) {
	if clientID == "" || secret == "" {
		return nil, errors.New("paypal API: client id and secret are required")
	}
	api, err := newAPIClient("paypal", cmp.Or(apiURL, "https://api-m.paypal.com"))
	if err != nil {
		return nil, err
	}
	return &PayPalAPI{api: api, clientID: clientID, secret: secret}, nil
}

// authorization returns the Authorization header of an API request: a
// bearer token, from the cache or got now.
func (p *PayPalAPI) authorization(ctx context.Context) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.token != "" && time.Now().Before(p.until) {
		return "Bearer " + p.token, nil
	}
	var token struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
	}
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte(p.clientID+":"+p.secret))
	if err := p.api.do(ctx, "POST", "/v1/oauth2/token", basic, url.Values{"grant_type": {"client_credentials"}}, &token); err != nil {
		return "", err
	}
	if token.AccessToken == "" {
		return "", errors.New("paypal API: the token answer holds no access_token")
	}
	p.token, p.until = token.AccessToken, time.Now().Add(time.Duration(token.ExpiresIn)*time.Second-time.Minute)
	return "Bearer " + p.token, nil
}

// get reads path with the Authorization auth. PayPal answering 401 drops
// that token from the cache, so the next request gets a new one: a token
// revoked, or credentials rotated, would otherwise refuse every request
// until the token's own expiry, hours later.
func (p *PayPalAPI) get(ctx context.Context, auth, path string, out any) error {
	err := p.api.do(ctx, "GET", path, auth, nil, out)
	var aerr *apiError
	if errors.As(err, &aerr) && aerr.status == http.StatusUnauthorized {
		p.mu.Lock()
		if "Bearer "+p.token == auth {
			p.token = ""
		}
		p.mu.Unlock()
	}
	return err
}

// Event returns PayPal's own copy of a webhook event (GET
// /v1/notifications/webhooks-events/{id}), for provider.PayPalConfig.Event.
// PayPal answering 404 is an error of its own (no such event); one that
// does not answer, answers 5xx or 429, or refuses the credentials wraps
// provider.ErrUnavailable, so the delivery is answered 503 and PayPal
// retries it.
func (p *PayPalAPI) Event(ctx context.Context, id string) ([]byte, error) {
	auth, err := p.authorization(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", provider.ErrUnavailable, err)
	}
	var raw json.RawMessage
	err = p.get(ctx, auth, "/v1/notifications/webhooks-events/"+url.PathEscape(id), &raw)
	var aerr *apiError
	switch {
	case errors.As(err, &aerr) && aerr.status == http.StatusNotFound:
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("%w: %v", provider.ErrUnavailable, err)
	}
	return raw, nil
}

func (s *payPalSource) Provider() string         { return "paypal" }
func (s *payPalSource) Throttled(err error) bool { return throttled(err) }

// payPalPage is one page of GET /v1/notifications/webhooks-events.
type payPalPage struct {
	Events []json.RawMessage `json:"events"`
	Links  []struct {
		Href string `json:"href"`
		Rel  string `json:"rel"`
	} `json:"links"`
}

// List gets an access token, then pages through each type the rules read
// (provider.PayPalRuleTypes), between from and now.
func (s *payPalSource) List(ctx context.Context, from time.Time, accept func(provider.Event) error) error {
	auth, err := s.api.authorization(ctx)
	if err != nil {
		return err
	}
	for _, eventType := range provider.PayPalRuleTypes {
		if err := s.listType(ctx, from, eventType, auth, accept); err != nil {
			return err
		}
	}
	return nil
}

// listType pages through one event type's events between from and now.
func (s *payPalSource) listType(ctx context.Context, from time.Time, eventType, authorization string, accept func(provider.Event) error) error {
	q := url.Values{
		"page_size":  {"300"},
		"start_time": {from.UTC().Format(time.RFC3339)},
		"end_time":   {s.cfg.Now().UTC().Add(time.Minute).Format(time.RFC3339)},
		"event_type": {eventType},
	}
	next := "/v1/notifications/webhooks-events?" + q.Encode()
	for next != "" {
		var page payPalPage
		if err := s.api.get(ctx, authorization, next, &page); err != nil {
			return err
		}
		for _, raw := range page.Events {
			ev, err := s.provider.Read(raw)
			if err != nil {
				s.cfg.Logger.WarnContext(ctx, "backfill: PayPal listed an event Guardian cannot read; skipped", "error", err)
				continue
			}
			if err := accept(ev); err != nil {
				return err
			}
		}
		next = ""
		for _, l := range page.Links {
			if l.Rel == "next" {
				next = l.Href
			}
		}
	}
	return nil
}
