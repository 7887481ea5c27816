// Package backfill fetches what a provider could not deliver. Providers
// retry a failed delivery for days (Stripe, Paddle and PayPal about
// three); an endpoint down for longer, misconfigured (a rotated secret) or
// disabled misses those events for good, and each of these providers
// documents listing its events through its API to recover. A backfill
// lists the events the payment rules read, since a durable checkpoint kept
// per provider, and passes each through the same intake as a webhook
// (fulfilment.Service.Accept): the same dedup, the same rules, so a webhook
// and a backfill of one event fulfil once whichever comes first.
//
// A Backfill is the run: checkpoint, rate-limit waits, intake, the
// checkpoint moved once everything listed is stored. A Source is one
// provider's events API.
package backfill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/db"
)

// Defaults for a backfill.
const (
	// DefaultLookback is how far back a first run (with no checkpoint)
	// looks: as long as the providers retry deliveries.
	DefaultLookback = 72 * time.Hour
	// DefaultOverlap is how far before the checkpoint each run starts
	// again, for events a provider lists a little after they happened.
	DefaultOverlap = 5 * time.Minute
	// DefaultInterval is how often the leader runs a backfill.
	DefaultInterval = 15 * time.Minute
)

// Source is one provider's events API.
type Source interface {
	// Provider names the provider; the checkpoint is kept under it.
	Provider() string
	// List calls accept with every event of the types the payment rules
	// read that happened at or after from, read as the provider's webhook
	// would be, until the list ends, accept fails, or the API does.
	// Events the provider lists that Guardian cannot read are logged and
	// skipped.
	List(ctx context.Context, from time.Time, accept func(provider.Event) error) error
	// Throttled reports whether err is the API's rate limit, which a run
	// waits out.
	Throttled(err error) bool
}

// Config is what every backfill needs.
type Config struct {
	// Service is the intake every fetched event goes through.
	Service *fulfilment.Service
	Store   *db.Store
	Logger  *slog.Logger
	// Lookback, Overlap: see the defaults.
	Lookback, Overlap time.Duration
	// Retries429 is how many times a run waits out a rate limit before it
	// gives up (its checkpoint stays). Defaults to 5.
	Retries429 int
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// Backfill runs one source's backfills.
type Backfill struct {
	cfg    Config
	source Source
}

// New returns a backfill of source.
func New(source Source, cfg Config) (*Backfill, error) {
	if source == nil || cfg.Service == nil || cfg.Store == nil || cfg.Logger == nil {
		return nil, errors.New("backfill: source, service, store and logger are required")
	}
	return &Backfill{cfg: cfg.withDefaults(), source: source}, nil
}

func (c Config) withDefaults() Config {
	c.Lookback = cmp.Or(c.Lookback, DefaultLookback)
	c.Overlap = cmp.Or(c.Overlap, DefaultOverlap)
	c.Retries429 = cmp.Or(c.Retries429, 5)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Provider names the provider this backfill lists.
func (b *Backfill) Provider() string { return b.source.Provider() }

// Result counts what one run did.
type Result struct {
	// From is where the run started listing.
	From time.Time
	// Listed, New and Fulfilments count the events the provider listed,
	// those Guardian did not hold yet, and the fulfilments they created.
	Listed, New, Fulfilments int
}

// Run lists every event of the rule types since the checkpoint (less the
// overlap), or since since when it is not zero, and accepts each through
// intake. The checkpoint moves to the run's start only once every listed
// event is stored; a run that fails (the API unreachable, a rate limit
// that does not end, Postgres down) leaves it, and the next run lists the
// same window again: dedup makes that harmless.
func (b *Backfill) Run(ctx context.Context, since time.Time) (Result, error) {
	name := b.source.Provider()
	started := b.cfg.Now()
	from := since
	if from.IsZero() {
		at, ok, err := db.Checkpoint(ctx, b.cfg.Store.Pool(), name)
		if err != nil {
			return Result{}, err
		}
		from = started.Add(-b.cfg.Lookback)
		if ok {
			from = at.Add(-b.cfg.Overlap)
		}
	}
	res := Result{From: from}
	wait := time.Second
	for try := 0; ; try++ {
		err := b.source.List(ctx, from, func(ev provider.Event) error { return b.accept(ctx, ev, &res) })
		if err != nil && b.source.Throttled(err) && try < b.cfg.Retries429 {
			b.cfg.Logger.WarnContext(ctx, "backfill: the provider rate-limited the listing; waiting", "provider", name, "wait", wait.String())
			select {
			case <-ctx.Done():
				return res, ctx.Err()
			case <-time.After(wait):
			}
			wait = min(2*wait, 30*time.Second)
			continue
		}
		if err != nil {
			return res, fmt.Errorf("backfill %s: %w", name, err)
		}
		break
	}
	if err := db.AdvanceCheckpoint(ctx, b.cfg.Store.Pool(), name, started); err != nil {
		return res, err
	}
	b.cfg.Logger.InfoContext(ctx, "backfill: run done", "provider", name, "from", from, "listed", res.Listed, "new", res.New, "fulfilments", res.Fulfilments)
	return res, nil
}

// accept takes one listed event through intake and counts it.
func (b *Backfill) accept(ctx context.Context, ev provider.Event, res *Result) error {
	ev.Origin = "backfill"
	got, err := b.cfg.Service.Accept(ctx, ev)
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
	return nil
}
