package backfill

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/url"
	"time"

	"github.com/guardian-pay/guardian/app/provider"
)

// PayPalConfig configures a PayPal backfill.
type PayPalConfig struct {
	// ClientID and ClientSecret are a PayPal REST app's credentials, which
	// get an access token that may list webhook events. Required; the
	// secret is never logged.
	ClientID, ClientSecret string
	// APIURL is PayPal's API: https://api-m.paypal.com (the default), or
	// https://api-m.sandbox.paypal.com for a sandbox; tests point it at a
	// fake.
	APIURL string
	// Provider applies the payment rules.
	Provider *provider.PayPal
	Config
}

// payPalSource lists PayPal's GET /v1/notifications/webhooks-events.
type payPalSource struct {
	api              *apiClient
	clientID, secret string
	provider         *provider.PayPal
	cfg              Config
}

// NewPayPal returns a backfill from PayPal's webhook events API.
func NewPayPal(cfg PayPalConfig) (*Backfill, error) {
	if cfg.ClientID == "" || cfg.ClientSecret == "" || cfg.Provider == nil || cfg.Logger == nil {
		return nil, errors.New("backfill paypal: client id and secret, provider and logger are required")
	}
	api, err := newAPIClient("paypal", cmp.Or(cfg.APIURL, "https://api-m.paypal.com"))
	if err != nil {
		return nil, err
	}
	return New(&payPalSource{api: api, clientID: cfg.ClientID, secret: cfg.ClientSecret, provider: cfg.Provider, cfg: cfg.Config.withDefaults()}, cfg.Config)
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
	var token struct {
		AccessToken string `json:"access_token"`
	}
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte(s.clientID+":"+s.secret))
	if err := s.api.do(ctx, "POST", "/v1/oauth2/token", basic, url.Values{"grant_type": {"client_credentials"}}, &token); err != nil {
		return err
	}
	if token.AccessToken == "" {
		return errors.New("paypal API: the token answer holds no access_token")
	}
	for _, eventType := range provider.PayPalRuleTypes {
		if err := s.listType(ctx, from, eventType, "Bearer "+token.AccessToken, accept); err != nil {
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
		if err := s.api.do(ctx, "GET", next, authorization, nil, &page); err != nil {
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
