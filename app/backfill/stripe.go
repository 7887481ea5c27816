package backfill

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/settings"
)

// StripeConfig configures a Stripe backfill.
type StripeConfig struct {
	// APIKey is a Stripe secret or restricted key that may read events.
	// Required; never logged.
	APIKey string
	// APIURL is Stripe's API. Defaults to https://api.stripe.com; tests
	// point it at a fake.
	APIURL string
	// Provider applies the payment rules and names the types to list.
	Provider *provider.Stripe
	Config
}

// stripeSource lists Stripe's GET /v1/events.
type stripeSource struct {
	provider *provider.Stripe
	client   *stripe.Client
	logger   *slog.Logger
}

// NewStripe returns a backfill from Stripe's events API.
func NewStripe(cfg StripeConfig) (*Backfill, error) {
	if cfg.APIKey == "" || cfg.Provider == nil || cfg.Logger == nil {
		return nil, errors.New("backfill stripe: API key, provider and logger are required")
	}
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL: stripe.String(cmp.Or(cfg.APIURL, "https://api.stripe.com")),
		// stripe-go's own retries are off: a 429 is waited out by the run,
		// where the wait is logged and bounded.
		MaxNetworkRetries: stripe.Int64(0),
		// Its logger would print request failures; Guardian logs its own,
		// without the key.
		LeveledLogger:   &stripe.LeveledLogger{Level: stripe.LevelNull},
		HTTPClient:      &http.Client{Timeout: 30 * time.Second},
		EnableTelemetry: stripe.Bool(false),
	})
	client := stripe.NewClient(cfg.APIKey, stripe.WithBackends(&stripe.Backends{API: backend, Connect: backend, Uploads: backend, MeterEvents: backend}))
	return New(&stripeSource{provider: cfg.Provider, client: client, logger: cfg.Logger}, cfg.Config)
}

func (s *stripeSource) Provider() string { return "stripe" }

// Throttled reports a 429 from Stripe.
func (s *stripeSource) Throttled(err error) bool {
	var serr *stripe.Error
	return errors.As(err, &serr) && serr.HTTPStatusCode == http.StatusTooManyRequests
}

// List pages through the events since from, newest first.
func (s *stripeSource) List(ctx context.Context, from time.Time, accept func(provider.Event) error) error {
	params := &stripe.EventListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: from.Unix()}}
	for _, t := range s.provider.RuleTypes() {
		params.Types = append(params.Types, stripe.String(t))
	}
	params.Limit = stripe.Int64(100)
	for e, err := range s.client.V1Events.List(ctx, params) {
		if err != nil {
			return describe(err)
		}
		body, err := envelope(e)
		if err != nil {
			return err
		}
		ev, err := s.provider.Read(body)
		if err != nil {
			s.logger.WarnContext(ctx, "backfill: Stripe listed an event Guardian cannot read; skipped", "event_id", e.ID, "error", err)
			continue
		}
		if err := accept(ev); err != nil {
			return err
		}
	}
	return nil
}

// envelope rebuilds an event's body from the API's answer: the envelope's
// fields and the object exactly as Stripe returned it.
func envelope(e *stripe.Event) ([]byte, error) {
	var object json.RawMessage
	if e.Data != nil {
		object = e.Data.Raw
	}
	if len(object) == 0 {
		object = json.RawMessage("{}")
	}
	return json.Marshal(map[string]any{
		"id": e.ID, "object": "event", "type": string(e.Type), "created": e.Created,
		"api_version": e.APIVersion, "livemode": e.Livemode, "data": map[string]any{"object": object},
	})
}

// describe keeps what an operator needs from a Stripe error: never the
// request, which carries the key in its headers.
func describe(err error) error {
	var serr *stripe.Error
	if errors.As(err, &serr) {
		return &stripeError{serr: serr}
	}
	return err
}

// stripeError is a Stripe API error as an operator reads it; it unwraps to
// the *stripe.Error, so Throttled still sees the status.
type stripeError struct{ serr *stripe.Error }

func (e *stripeError) Error() string {
	return fmt.Sprintf("stripe answered %d %s: %s", e.serr.HTTPStatusCode, e.serr.Type, e.serr.Msg)
}

func (e *stripeError) Unwrap() error { return e.serr }

func init() {
	Register(Driver{Provider: "stripe", Needs: "set GUARDIAN_STRIPE_API_KEY to a Stripe key that may read events", Open: openStripe})
}

// openStripe makes the Stripe backfill of the served Stripe provider when
// it has Stripe's API (GUARDIAN_STRIPE_API_KEY, read and checked against
// the deployment's mode with the provider's settings).
func openStripe(_ *settings.Env, _ provider.Common, p provider.Provider) (Maker, error) {
	stripe, _ := p.(*provider.Stripe)
	if stripe == nil || stripe.API() == nil {
		return nil, nil
	}
	api := stripe.API()
	return func(cfg Config) (*Backfill, error) {
		return NewStripe(StripeConfig{APIKey: api.Key(), APIURL: api.URL(), Provider: stripe, Config: cfg})
	}, nil
}
