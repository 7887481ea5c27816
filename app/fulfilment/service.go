package fulfilment

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/batch"
	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/filter"
	"github.com/guardian-pay/guardian/app/metrics"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/db"
)

// Defaults, each written once: the wiring, the River adapters and the
// configuration read them from here.
const (
	// DefaultConnectorTimeout bounds one connector call or lookup.
	DefaultConnectorTimeout = 30 * time.Second
	// DefaultDispatchLease is how long a fulfilment may stay dispatching
	// before the sweep parks it.
	DefaultDispatchLease = 5 * time.Minute
	// DefaultReconcileGrace is how long a row stays parked before its first
	// lookup.
	DefaultReconcileGrace = time.Minute
	// DefaultReconcileBackoff is the wait after the first undecided lookup.
	DefaultReconcileBackoff = time.Minute
	// DefaultReconcileMaxBackoff caps the wait between lookups.
	DefaultReconcileMaxBackoff = time.Hour
	// DefaultLookupTimeout bounds one lookup (never more than the
	// connector timeout).
	DefaultLookupTimeout = 10 * time.Second
	// MaxLookupTimeout is the longest a lookup may take: a quarter of a
	// reconcile round, so a slow receiver delays a round, never stalls it.
	MaxLookupTimeout = 15 * time.Second
	// RecordMargin is the time a dispatch keeps, past the connector's
	// timeout, to record the outcome; a lease must exceed the timeout plus
	// this margin.
	RecordMargin = 15 * time.Second
)

// Enqueuer inserts the dispatch job for a fulfilment inside the caller's
// transaction, so the job exists if and only if the transaction commits.
// Implementations must be safe for concurrent use.
type Enqueuer interface {
	EnqueueDispatchTx(ctx context.Context, tx pgx.Tx, fulfilmentIDs ...string) error
	// DispatchJobs says how the jobs it inserts are named, so the sweep
	// can tell a fulfilment with a live job from a stranded one.
	DispatchJobs() db.DispatchJobs
}

// Config configures a Service.
type Config struct {
	// Store is the database every transition is written to. Required.
	Store *db.Store
	// Enqueuer inserts dispatch jobs. Required.
	Enqueuer Enqueuer
	// Logger receives one line per transition. Required.
	Logger *slog.Logger
	// Connector performs the action. Required to dispatch; an intake-only
	// process may leave it nil.
	Connector connector.Connector
	// Looker, when set, lets Reconcile resolve parked fulfilments by asking
	// the connector. Nil leaves them to operators.
	Looker connector.Looker
	// Filter is the optional duplicate filter in front of intake.
	Filter filter.Filter
	// Mappers, by provider name, apply each provider's payment rules to a
	// stored event again when an operator replays one that named no
	// payment (the configuration behind it fixed since). Optional.
	Mappers map[string]provider.Mapper
	// Metrics counts transitions, dispatches and filter errors; nil counts
	// nothing.
	Metrics *metrics.Metrics
	// Reversals is what a refund or dispute takes a fulfilled payment back
	// for. Nil is DefaultReversalPolicy; an empty policy takes nothing
	// back.
	Reversals ReversalPolicy

	// ConnectorTimeout bounds one connector call, measured from before the
	// claim. Defaults to DefaultConnectorTimeout.
	ConnectorTimeout time.Duration
	// DispatchLease is how long a fulfilment may stay dispatching before the
	// sweep parks it. It must exceed ConnectorTimeout plus RecordMargin.
	// Defaults to DefaultDispatchLease.
	DispatchLease time.Duration
	// ReconcileGrace is how long a row stays parked before its first lookup,
	// so a call still running at the receiver can finish. At least
	// ConnectorTimeout. Defaults to DefaultReconcileGrace.
	ReconcileGrace time.Duration
	// ReconcileBackoff is the wait after the first undecided lookup; it
	// doubles with each further one, up to ReconcileMaxBackoff. Defaults to
	// DefaultReconcileBackoff.
	ReconcileBackoff time.Duration
	// ReconcileMaxBackoff caps the wait between lookups. Defaults to
	// DefaultReconcileMaxBackoff.
	ReconcileMaxBackoff time.Duration
	// LookupTimeout bounds one lookup. Defaults to DefaultLookupTimeout or
	// ConnectorTimeout, whichever is shorter; at most MaxLookupTimeout.
	LookupTimeout time.Duration

	// Batch caps how many concurrent deliveries share one intake
	// transaction, and how many claims or outcomes of concurrent
	// dispatches share one statement; 1 gives each its own. Defaults to
	// DefaultBatch.
	Batch int
	// BatchWriters is how many batches of each kind may run at once.
	// Defaults to DefaultBatchWriters.
	BatchWriters int

	// Now, when set, is the clock the sweep measures leases against. Nil
	// means the database's clock, the one that stamps dispatched_at, so
	// that skew between hosts cannot shorten a lease. Tests pin it.
	Now func() time.Time
}

// Service owns every move of a fulfilment between states: intake, replay,
// dispatch, the stale sweep, reconciliation by lookup and operator
// resolution. It is safe for concurrent use.
type Service struct {
	cfg Config
	// intake gathers concurrent deliveries into transactions; nil with
	// Batch 1.
	intake *batch.Gatherer[*acceptCall]
	// claims and outcomes gather concurrent dispatches' claims and
	// outcome moves into statements; nil with Batch 1.
	claims   *batch.Gatherer[*claimCall]
	outcomes *batch.Gatherer[*outcomeCall]
}

// New returns a Service, or an error naming what is missing or inconsistent.
func New(cfg Config) (*Service, error) {
	cfg.ConnectorTimeout = cmp.Or(cfg.ConnectorTimeout, DefaultConnectorTimeout)
	if cfg.Reversals == nil {
		cfg.Reversals = DefaultReversalPolicy
	}
	cfg.DispatchLease = cmp.Or(cfg.DispatchLease, DefaultDispatchLease)
	cfg.ReconcileGrace = cmp.Or(cfg.ReconcileGrace, DefaultReconcileGrace)
	cfg.ReconcileBackoff = cmp.Or(cfg.ReconcileBackoff, DefaultReconcileBackoff)
	cfg.ReconcileMaxBackoff = cmp.Or(cfg.ReconcileMaxBackoff, DefaultReconcileMaxBackoff)
	cfg.LookupTimeout = cmp.Or(cfg.LookupTimeout, min(DefaultLookupTimeout, cfg.ConnectorTimeout))
	if err := CheckTimings(cfg.ConnectorTimeout, cfg.DispatchLease, cfg.ReconcileGrace); err != nil {
		return nil, fmt.Errorf("fulfilment: %w", err)
	}
	switch {
	case cfg.Store == nil || cfg.Enqueuer == nil || cfg.Logger == nil:
		return nil, errors.New("fulfilment: store, enqueuer and logger are required")
	case cfg.Batch < 0 || cfg.BatchWriters < 0:
		return nil, errors.New("fulfilment: intake batch and writers must not be negative")
	case cfg.LookupTimeout > MaxLookupTimeout:
		return nil, fmt.Errorf("fulfilment: lookup timeout %s exceeds %s", cfg.LookupTimeout, MaxLookupTimeout)
	}
	s := &Service{cfg: cfg}
	if cfg.Batch != 1 {
		size, writers := cmp.Or(cfg.Batch, DefaultBatch), cmp.Or(cfg.BatchWriters, DefaultBatchWriters)
		s.intake = &batch.Gatherer[*acceptCall]{Write: s.writeBatch, MaxBatch: size, MaxWriters: writers}
		s.claims = &batch.Gatherer[*claimCall]{Write: s.writeClaims, MaxBatch: size, MaxWriters: writers}
		s.outcomes = &batch.Gatherer[*outcomeCall]{Write: s.writeOutcomes, MaxBatch: size, MaxWriters: writers}
	}
	return s, nil
}

// CheckTimings holds the rules between the connector timeout, the dispatch
// lease and the reconcile grace, the one place they are stated (the
// configuration names its variables around these errors):
//
//   - the lease must exceed the timeout plus RecordMargin, or the sweep
//     could park a call still recording its outcome;
//   - the grace must be at least the timeout, or a lookup could ask about a
//     call still running at the receiver.
func CheckTimings(connectorTimeout, dispatchLease, reconcileGrace time.Duration) error {
	var errs []error
	if dispatchLease <= connectorTimeout+RecordMargin {
		errs = append(errs, fmt.Errorf("dispatch lease (%s) must exceed the connector timeout (%s) plus %s to record the outcome",
			dispatchLease, connectorTimeout, RecordMargin))
	}
	if reconcileGrace < connectorTimeout {
		errs = append(errs, fmt.Errorf("reconcile grace (%s) must be at least the connector timeout (%s): a parked call may still be running at the receiver until then",
			reconcileGrace, connectorTimeout))
	}
	return errors.Join(errs...)
}

// dbNow is the pinned clock for statements that would otherwise read the
// database's own; nil means "the database's".
func (s *Service) dbNow() *time.Time {
	if s.cfg.Now == nil {
		return nil
	}
	t := s.cfg.Now()
	return &t
}

// ConnectorTimeout is the bound on one connector call, for adapters that
// size their own timeouts around it.
func (s *Service) ConnectorTimeout() time.Duration { return s.cfg.ConnectorTimeout }

// DispatchLease is how long a claim may stay dispatching before the sweep
// parks it; River's stuck-job rescue uses the same span.
func (s *Service) DispatchLease() time.Duration { return s.cfg.DispatchLease }

// Reconciles reports whether Reconcile can ask anyone: a Looker is set.
func (s *Service) Reconciles() bool { return s.cfg.Looker != nil }

// Batching defaults.
const (
	// DefaultBatch caps the items of one batch.
	DefaultBatch = 256
	// DefaultBatchWriters is how many batches of one kind may run at once.
	DefaultBatchWriters = 4
)
