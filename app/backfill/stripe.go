// Package backfill fetches what a provider could not deliver. Stripe retries
// a failed delivery for up to three days; an endpoint down for longer,
// misconfigured (a rotated secret) or disabled misses those events for good,
// and Stripe's docs recommend listing events through its API to recover.
// A backfill lists the events the payment rules read, since a durable
// checkpoint, and passes each through the same intake as a webhook
// (fulfilment.Service.Accept): the same dedup, the same rules, so a webhook
// and a backfill of one event fulfil once whichever comes first.
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

	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/db"
)

// Defaults for a Stripe backfill.
const (
	// DefaultLookback is how far back a first run (with no checkpoint)
	// looks: as long as Stripe retries deliveries.
	DefaultLookback = 72 * time.Hour
	// DefaultOverlap is how far before the checkpoint each run starts
	// again, for events Stripe lists a little after they were created.
	DefaultOverlap = 5 * time.Minute
	// DefaultInterval is how often the leader runs a backfill.
	DefaultInterval = 15 * time.Minute
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
	// Service is the intake every fetched event goes through.
	Service *fulfilment.Service
	Store   *db.Store
	Logger  *slog.Logger
	// Lookback, Overlap: see the defaults.
	Lookback, Overlap time.Duration
	// Retries429 is how many times a run waits out a 429 before it gives
	// up (its checkpoint stays). Defaults to 5.
	Retries429 int
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// Stripe runs backfills from Stripe's events API.
type Stripe struct {
	cfg    StripeConfig
	client *stripe.Client
}

// NewStripe returns a Stripe backfill.
func NewStripe(cfg StripeConfig) (*Stripe, error) {
	if cfg.APIKey == "" || cfg.Provider == nil || cfg.Service == nil || cfg.Store == nil || cfg.Logger == nil {
		return nil, errors.New("backfill: API key, provider, service, store and logger are required")
	}
	cfg.APIURL = cmp.Or(cfg.APIURL, "https://api.stripe.com")
	cfg.Lookback = cmp.Or(cfg.Lookback, DefaultLookback)
	cfg.Overlap = cmp.Or(cfg.Overlap, DefaultOverlap)
	cfg.Retries429 = cmp.Or(cfg.Retries429, 5)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL: stripe.String(cfg.APIURL),
		// stripe-go's own retries are off: a 429 is waited out here, where
		// the wait is logged and bounded.
		MaxNetworkRetries: stripe.Int64(0),
		// Its logger would print request failures; Guardian logs its own,
		// without the key.
		LeveledLogger:   &stripe.LeveledLogger{Level: stripe.LevelNull},
		HTTPClient:      &http.Client{Timeout: 30 * time.Second},
		EnableTelemetry: stripe.Bool(false),
	})
	client := stripe.NewClient(cfg.APIKey, stripe.WithBackends(&stripe.Backends{API: backend, Connect: backend, Uploads: backend, MeterEvents: backend}))
	return &Stripe{cfg: cfg, client: client}, nil
}

// Result counts what one run did.
type Result struct {
	// From is where the run started listing.
	From time.Time
	// Listed, New and Fulfilments count the events Stripe listed, those
	// Guardian did not hold yet, and the fulfilments they created.
	Listed, New, Fulfilments int
}

// Run lists every event of the rule types created since the checkpoint
// (less the overlap), or since since when it is not zero, and accepts each
// through intake. The checkpoint moves to the run's start only once every
// listed event is stored; a run that fails (Stripe unreachable, a 429 that
// does not end, Postgres down) leaves it, and the next run lists the same
// window again: dedup makes that harmless.
func (s *Stripe) Run(ctx context.Context, since time.Time) (Result, error) {
	started := s.cfg.Now()
	from := since
	if from.IsZero() {
		at, ok, err := db.Checkpoint(ctx, s.cfg.Store.Pool(), "stripe")
		if err != nil {
			return Result{}, err
		}
		from = started.Add(-s.cfg.Lookback)
		if ok {
			from = at.Add(-s.cfg.Overlap)
		}
	}
	res := Result{From: from}
	wait := time.Second
	for try := 0; ; try++ {
		err := s.list(ctx, from, &res)
		var serr *stripe.Error
		if errors.As(err, &serr) && serr.HTTPStatusCode == http.StatusTooManyRequests && try < s.cfg.Retries429 {
			s.cfg.Logger.WarnContext(ctx, "backfill: Stripe rate-limited the listing; waiting", "wait", wait.String())
			select {
			case <-ctx.Done():
				return res, ctx.Err()
			case <-time.After(wait):
			}
			wait = min(2*wait, 30*time.Second)
			continue
		}
		if err != nil {
			return res, fmt.Errorf("backfill stripe: %w", describe(err))
		}
		break
	}
	if err := db.AdvanceCheckpoint(ctx, s.cfg.Store.Pool(), "stripe", started); err != nil {
		return res, err
	}
	s.cfg.Logger.InfoContext(ctx, "backfill: stripe run done", "from", from, "listed", res.Listed, "new", res.New, "fulfilments", res.Fulfilments)
	return res, nil
}

// list pages through the events since from, newest first, and accepts each.
func (s *Stripe) list(ctx context.Context, from time.Time, res *Result) error {
	params := &stripe.EventListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: from.Unix()}}
	for _, t := range s.cfg.Provider.RuleTypes() {
		params.Types = append(params.Types, stripe.String(t))
	}
	params.Limit = stripe.Int64(100)
	for e, err := range s.client.V1Events.List(ctx, params) {
		if err != nil {
			return err
		}
		body, err := envelope(e)
		if err != nil {
			return err
		}
		ev, err := s.cfg.Provider.Read(body)
		if err != nil {
			s.cfg.Logger.WarnContext(ctx, "backfill: Stripe listed an event Guardian cannot read; skipped", "event_id", e.ID, "error", err)
			continue
		}
		ev.Origin = "backfill"
		got, err := s.cfg.Service.Accept(ctx, ev)
		if err != nil {
			return err
		}
		res.Listed++
		if got.Outcome == fulfilment.NewEvent {
			res.New++
		}
		if got.FulfilmentID != "" {
			res.Fulfilments++
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
		return fmt.Errorf("stripe answered %d %s: %s", serr.HTTPStatusCode, serr.Type, serr.Msg)
	}
	return err
}
