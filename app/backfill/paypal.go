package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"time"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/settings"
)

// PayPalConfig configures a PayPal backfill.
type PayPalConfig struct {
	// API is PayPal's API with the REST app's credentials, whose access
	// token may list webhook events (provider.NewPayPalAPI). Required.
	API *provider.PayPalAPI
	// Provider applies the payment rules.
	Provider *provider.PayPal
	Config
}

// payPalSource lists PayPal's GET /v1/notifications/webhooks-events.
type payPalSource struct {
	api      *provider.PayPalAPI
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

func (s *payPalSource) Provider() string         { return "paypal" }
func (s *payPalSource) Throttled(err error) bool { return provider.Throttled(err) }

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
	auth, err := s.api.Authorization(ctx)
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
		if err := s.api.Get(ctx, authorization, next, &page); err != nil {
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

func init() {
	Register(Driver{Provider: "paypal", Needs: "set GUARDIAN_PAYPAL_CLIENT_ID and GUARDIAN_PAYPAL_CLIENT_SECRET (and GUARDIAN_PAYPAL_WEBHOOK_IDS)", Open: openPayPal})
}

// openPayPal makes the PayPal backfill when the provider has PayPal's API
// (its REST app's credentials are provider settings: the confirmation of
// deliveries needs them too).
func openPayPal(_ *settings.Env, _ provider.Common, p provider.Provider) (Maker, error) {
	paypal, _ := p.(*provider.PayPal)
	if paypal == nil || paypal.API() == nil {
		return nil, nil
	}
	return func(cfg Config) (*Backfill, error) {
		return NewPayPal(PayPalConfig{API: paypal.API(), Provider: paypal, Config: cfg})
	}, nil
}
