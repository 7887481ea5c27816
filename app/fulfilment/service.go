package fulfilment

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/actions"
	"github.com/guardian-pay/guardian/app/batch"
	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/filter"
	"github.com/guardian-pay/guardian/app/metrics"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/state"
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

// Enqueuer inserts the jobs of fulfilments and purchases inside the
// caller's transaction, so a job exists if and only if the transaction
// commits. Implementations must be safe for concurrent use.
type Enqueuer interface {
	EnqueueDispatchTx(ctx context.Context, tx pgx.Tx, fulfilmentIDs ...string) error
	// EnqueueRouteTx inserts a job that calls RouteAwaiting for each
	// purchase; a purchase with a live one keeps it.
	EnqueueRouteTx(ctx context.Context, tx pgx.Tx, purchases ...db.Payment) error
	// DispatchJobs says how the jobs it inserts are named and written:
	// the sweep tells a fulfilment with a live job from a stranded one by
	// the names, and the statement that makes a payment's fulfilments
	// writes their jobs as EnqueueDispatchTx would (db.Birth.Jobs).
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
	// Actions are what purchases pay for and the routes that say which
	// (app/actions), with Performers performing each by name. Nil is the
	// one action of a deployment without an actions file,
	// actions.Fulfil, performed by Connector and Looker under Reversals.
	Actions    *actions.Set
	Performers map[string]Performer
	// Connector performs the one action when Actions is nil. Required to
	// dispatch; an intake-only process may leave it nil.
	Connector connector.Connector
	// Looker, when set, lets Reconcile resolve the one action's parked
	// fulfilments by asking the connector. Nil leaves them to operators.
	Looker connector.Looker
	// Mode is the money the deployment serves: the mode of a purchase
	// whose event does not say (provider.PurchaseOf). Zero is live.
	Mode provider.Mode
	// Filter is the optional duplicate filter in front of intake.
	Filter filter.Filter
	// Mappers, by provider name, apply each provider's payment rules to a
	// stored event again when an operator replays one that named no
	// payment (the configuration behind it fixed since). Optional.
	Mappers map[string]provider.Mapper
	// Items, by provider name, list what a purchase bought where its paid
	// event names none (provider.Event.ItemsRef) and a route matches on
	// products or prices: such a purchase awaits its items, routed once
	// they are fetched (RouteAwaiting). A provider without one routes on
	// what its events say. Optional.
	Items map[string]ItemsSource
	// Metrics counts transitions, dispatches and filter errors; nil counts
	// nothing.
	Metrics *metrics.Metrics
	// Reversals is what a refund or dispute takes the one action back for
	// when Actions is nil. Nil is actions.DefaultPolicy; an empty policy
	// takes nothing back.
	Reversals actions.Policy

	// ConnectorTimeout bounds one connector call, measured from before the
	// claim: the one action's, or with Actions the longest of the
	// performers' (set by New). Defaults to DefaultConnectorTimeout.
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
	// performers perform each action of cfg.Actions, by name; timeouts
	// are their call timeouts, and asks names the actions with a lookup.
	performers map[string]Performer
	timeouts   map[string]time.Duration
	asks       []string
	// jobs is how the fulfilments' statements write their dispatch jobs,
	// and notices when River's workers were last told of new ones
	// (announce).
	jobs    db.DispatchJobs
	notices notices
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
		cfg.Reversals = actions.DefaultPolicy
	}
	performers, err := performersOf(&cfg)
	if err != nil {
		return nil, fmt.Errorf("fulfilment: %w", err)
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
	s := &Service{cfg: cfg, performers: performers, timeouts: map[string]time.Duration{}, jobs: cfg.Enqueuer.DispatchJobs()}
	if s.jobs.Queue == "" || s.jobs.Topic == "" {
		return nil, errors.New("fulfilment: the enqueuer names no queue or notification topic for its dispatch jobs")
	}
	for _, name := range cfg.Actions.Names() {
		s.timeouts[name] = performers[name].Timeout
		if performers[name].Looker != nil {
			s.asks = append(s.asks, name)
		}
	}
	if cfg.Batch != 1 {
		size, writers := cmp.Or(cfg.Batch, DefaultBatch), cmp.Or(cfg.BatchWriters, DefaultBatchWriters)
		observe := func(kind string) func(int) { return func(n int) { cfg.Metrics.Batch(kind, n) } }
		s.intake = &batch.Gatherer[*acceptCall]{Write: s.writeBatch, MaxBatch: size, MaxWriters: writers, Observe: observe("intake")}
		s.claims = &batch.Gatherer[*claimCall]{Write: s.writeClaims, MaxBatch: size, MaxWriters: writers, Observe: observe("claim")}
		s.outcomes = &batch.Gatherer[*outcomeCall]{Write: s.writeOutcomes, MaxBatch: size, MaxWriters: writers, Observe: observe("outcome")}
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

// Reconciles reports whether Reconcile can ask anyone: an action has a
// lookup.
func (s *Service) Reconciles() bool { return len(s.asks) > 0 }

// Actions are the deployment's actions and routes.
func (s *Service) Actions() *actions.Set { return s.cfg.Actions }

// Performer performs one action: its connector, its lookup (nil: parked
// rows of the action wait for an operator) and its call timeout.
type Performer struct {
	Connector connector.Connector
	Looker    connector.Looker
	// Timeout bounds one call. Defaults to Config.ConnectorTimeout.
	Timeout time.Duration
}

// performersOf completes cfg's actions and their performers: the one
// action over Connector and Looker when cfg names none, each performer's
// timeout defaulted, and ConnectorTimeout the longest, which the lease
// and grace are checked against. An action without a performer is an
// error.
func performersOf(cfg *Config) (map[string]Performer, error) {
	if cfg.Actions == nil {
		cfg.Actions = actions.Default(actions.Receiver{Timeout: cfg.ConnectorTimeout}, cfg.Reversals)
		cfg.Performers = map[string]Performer{actions.Fulfil: {Connector: cfg.Connector, Looker: cfg.Looker, Timeout: cfg.ConnectorTimeout}}
	}
	out := make(map[string]Performer, len(cfg.Performers))
	longest := time.Duration(0)
	for _, name := range cfg.Actions.Names() {
		p, ok := cfg.Performers[name]
		if !ok {
			return nil, fmt.Errorf("action %q has no performer", name)
		}
		p.Timeout = cmp.Or(p.Timeout, cfg.ConnectorTimeout)
		longest = max(longest, p.Timeout)
		out[name] = p
	}
	cfg.ConnectorTimeout = longest
	return out, nil
}

// performer returns the performer of the action named, if this process
// performs it.
func (s *Service) performer(name string) (Performer, bool) {
	p, ok := s.performers[name]
	return p, ok
}

// countMoved counts the moves of the rows ids from one state to another
// by their actions, read back by id: the set-based statements that moved
// them (reversals, the sweep) return ids alone. Counting is best effort:
// when the read fails, the moves are counted under "unknown".
func (s *Service) countMoved(ctx context.Context, from, to state.State, ids []string) {
	if len(ids) == 0 || s.cfg.Metrics == nil {
		return
	}
	byAction, err := db.ActionCounts(ctx, s.cfg.Store.Pool(), ids)
	if err != nil {
		s.cfg.Logger.DebugContext(ctx, "could not read the actions of moved rows for their metrics", "error", err)
		byAction = map[string]int{"unknown": len(ids)}
	}
	for action, n := range byAction {
		s.cfg.Metrics.Transition(action, from, to, n)
	}
}

// looker returns the lookup of the action named, or nil.
func (s *Service) looker(name string) connector.Looker {
	return s.performers[name].Looker
}

// Batching defaults.
const (
	// DefaultBatch caps the items of one batch.
	DefaultBatch = 256
	// DefaultBatchWriters is how many batches of one kind may run at once.
	// Two keep Postgres busy (one batch gathers while the other writes)
	// without splitting a load into more, smaller transactions: on a
	// 2-core machine, 2 writers against 4 cost 1.8 ms of CPU per payment
	// against 3.2 and fulfilled 1.7x as many, with a lower p50 at half
	// peak (docs/performance.md, "Tuning the batch writers").
	DefaultBatchWriters = 2
)
