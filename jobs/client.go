package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/guardian-pay/guardian/app/backfill"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/lock"
	"github.com/guardian-pay/guardian/app/metrics"
	"github.com/guardian-pay/guardian/db"
)

// Queue names. Maintenance work has its own queue so a backlog of
// dispatches never delays the sweep.
const (
	QueueDispatch    = "dispatch"
	QueueMaintenance = "maintenance"
	// QueueRoute fetches what purchases bought from providers' APIs
	// (RouteWorker): slow or failing APIs hold no dispatch back.
	QueueRoute = "route"
)

// Defaults for the River side of Guardian.
const (
	// DefaultDispatchWorkers is how many dispatches run at once in a
	// process. River refills free workers once per fetch cooldown, and a
	// dispatch under load (two commits, one call) outlasts a cooldown, so
	// the workers, not the CPU, held a pipeline at 50 on a fast machine
	// (docs/performance.md, "Tuning the dispatch workers").
	DefaultDispatchWorkers = 100
	// DefaultSweepInterval is how often the leader runs each of the three
	// sweeps (sweeps).
	DefaultSweepInterval = 30 * time.Second
	// DefaultReconcileInterval is how often the leader runs the reconciler.
	DefaultReconcileInterval = time.Minute
)

// routeWorkers is how many purchases' items are fetched at once in a
// process: a provider's API limits its callers, and a Checkout purchase
// is fetched once.
const routeWorkers = 4

// FetchCooldown is the pause between River fetches while jobs are waiting.
// River's default (100 ms) with 50 workers caps a process at 500 jobs/s;
// 20 ms lifts that cap above what Postgres commits on a small machine, and
// costs nothing when the queue is empty (River then waits for a notification).
const FetchCooldown = 20 * time.Millisecond

// PollOnlyFetchInterval is how often a poll-only client looks for new
// jobs: without notifications, a dispatch waits up to this long after its
// payment is accepted.
const PollOnlyFetchInterval = 200 * time.Millisecond

// Enqueuer inserts dispatch jobs through an insert-only River client: it
// works no jobs and elects no leader. It implements fulfilment.Enqueuer, so
// the domain can be built before the workers that call it.
type Enqueuer struct {
	river *river.Client[pgx.Tx]
}

// NewEnqueuer returns an Enqueuer over pool.
func NewEnqueuer(pool *pgxpool.Pool, logger *slog.Logger) (*Enqueuer, error) {
	if pool == nil || logger == nil {
		return nil, errors.New("jobs: pool and logger are required")
	}
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:        logger.With("component", "river"),
		FetchCooldown: FetchCooldown,
	})
	if err != nil {
		return nil, fmt.Errorf("river insert client: %w", err)
	}
	return &Enqueuer{river: rc}, nil
}

// EnqueueDispatchTx inserts the fulfilments' dispatch jobs in tx: one
// insert for one, River's COPY-based InsertManyFastTx for several.
func (e *Enqueuer) EnqueueDispatchTx(ctx context.Context, tx pgx.Tx, fulfilmentIDs ...string) error {
	if len(fulfilmentIDs) == 1 {
		_, err := e.river.InsertTx(ctx, tx, DispatchArgs{FulfilmentID: fulfilmentIDs[0]}, nil)
		return err
	}
	params := make([]river.InsertManyParams, len(fulfilmentIDs))
	for i, id := range fulfilmentIDs {
		params[i] = river.InsertManyParams{Args: DispatchArgs{FulfilmentID: id}}
	}
	_, err := e.river.InsertManyFastTx(ctx, tx, params)
	return err
}

// EnqueueRouteTx inserts, in tx, a routing job for each purchase recorded
// awaiting its items (RouteArgs); one that has a live job keeps it.
func (e *Enqueuer) EnqueueRouteTx(ctx context.Context, tx pgx.Tx, purchases ...db.Payment) error {
	for _, p := range purchases {
		if _, err := e.river.InsertTx(ctx, tx, RouteArgs{Provider: p.Provider, PaymentID: p.PaymentID}, nil); err != nil {
			return err
		}
	}
	return nil
}

// insertTopic is the topic of River's insert notifications (its notifier's
// NotificationTopicInsert, internal to River): a producer listening on it
// fetches the queue named at once. TestDispatchJobsAreRiversOwn holds it
// to River's.
const insertTopic = "river_insert"

// DispatchJobs names the dispatch jobs EnqueueDispatchTx inserts, for the
// sweep's look-up of live jobs: their kind (DispatchArgs.Kind) and the
// argument holding the fulfilment's id (DispatchArgs' json name); and the
// columns River writes for their options (DispatchArgs.InsertOpts over
// River's defaults), for the statements that write them beside the
// fulfilments they dispatch.
func (e *Enqueuer) DispatchJobs() db.DispatchJobs { return DispatchJobs() }

// DispatchJobs is what every Enqueuer says of its dispatch jobs
// (Enqueuer.DispatchJobs), for stand-ins of the Enqueuer in tests.
func DispatchJobs() db.DispatchJobs {
	id, _ := reflect.TypeFor[DispatchArgs]().FieldByName("FulfilmentID")
	opts := DispatchArgs{}.InsertOpts()
	return db.DispatchJobs{
		Kind: DispatchArgs{}.Kind(), IDArg: id.Tag.Get("json"),
		Queue:       cmp.Or(opts.Queue, river.QueueDefault),
		Priority:    cmp.Or(opts.Priority, river.PriorityDefault),
		MaxAttempts: cmp.Or(opts.MaxAttempts, river.MaxAttemptsDefault),
		Topic:       insertTopic,
		NotifyEvery: FetchCooldown,
	}
}

// River returns the insert-only River client, for River UI in a process
// that works no jobs.
func (e *Enqueuer) River() *river.Client[pgx.Tx] { return e.river }

// Config configures Guardian's working River client.
type Config struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	// Service is the domain every worker calls. Required.
	Service *fulfilment.Service
	// Locker keeps periodic work from overlapping itself. Required.
	Locker lock.Locker
	// Tokens, when set, has expired single-use tokens pruned by the
	// maintenance worker.
	Tokens TokenPruner
	// Refusals, when set, has refused-request records pruned by the
	// maintenance worker to refusals.Retention and refusals.Rows.
	Refusals RefusalPruner
	// Bodies, with PayloadRetention above zero, empties the bodies of events
	// older than PayloadRetention on the leader's maintenance round.
	Bodies           BodyPruner
	PayloadRetention time.Duration
	// Tally, when set, has the counts' changes folded every
	// TallyInterval on the leader (TallyWorker).
	Tally TallyFolder
	// JobRetention is how long River keeps completed and cancelled jobs
	// (discarded ones a week, or JobRetention if longer). Defaults to
	// DefaultJobRetention.
	JobRetention time.Duration
	// Metrics counts each maintenance round; nil counts nothing.
	Metrics *metrics.Metrics
	// PruneInterval is how often the leader runs each pruner. Defaults to
	// DefaultPruneInterval.
	PruneInterval time.Duration
	// SweepInterval is how often the leader runs each sweep. Defaults to
	// DefaultSweepInterval; at least 1 second.
	SweepInterval time.Duration
	// DispatchWorkers is how many dispatches run at once in this process.
	// Defaults to DefaultDispatchWorkers.
	DispatchWorkers int
	// ID names this process in River and in transition logs. Defaults to
	// River's generated id.
	ID string
	// FetchPollInterval is how often River polls when LISTEN/NOTIFY is quiet.
	// Defaults to River's default (1 second), or PollOnlyFetchInterval
	// behind a transaction pooler; a shorter one also shortens River's fetch
	// cooldown to match.
	FetchPollInterval time.Duration
	// Pooler is what stands between Pool and Postgres. Behind a
	// db.TransactionPooler, River runs poll-only: a LISTEN would stay on
	// whichever server session the pooler lent it, and its notifications
	// go to nobody. New jobs are then found by polling, and a leader's
	// resignation is noticed within River's election interval.
	Pooler db.Pooler
	// ReconcileInterval is how often the leader runs the reconciler.
	// Defaults to DefaultReconcileInterval; at least 1 second.
	ReconcileInterval time.Duration
	// Tracer traces each dispatch; nil traces nothing.
	Tracer trace.Tracer
	// Backfills, one per provider with an events API configured, run on
	// the leader every BackfillInterval.
	Backfills []*backfill.Backfill
	// BackfillInterval defaults to backfill.DefaultInterval; at least 1 minute.
	BackfillInterval time.Duration
}

func (c *Config) pollOnly() bool { return c.Pooler == db.TransactionPooler }

func (c *Config) withDefaults() Config {
	out := *c
	out.SweepInterval = cmp.Or(out.SweepInterval, DefaultSweepInterval)
	out.DispatchWorkers = cmp.Or(out.DispatchWorkers, DefaultDispatchWorkers)
	out.ReconcileInterval = cmp.Or(out.ReconcileInterval, DefaultReconcileInterval)
	out.BackfillInterval = cmp.Or(out.BackfillInterval, backfill.DefaultInterval)
	if out.pollOnly() {
		out.FetchPollInterval = cmp.Or(out.FetchPollInterval, PollOnlyFetchInterval)
	}
	if out.Tracer == nil {
		out.Tracer = noop.NewTracerProvider().Tracer("guardian")
	}
	return out
}

func (c *Config) validate() error {
	switch {
	case c.Pool == nil || c.Logger == nil || c.Service == nil || c.Locker == nil:
		return errors.New("jobs: pool, logger, service and locker are required")
	case c.SweepInterval < time.Second:
		return errors.New("jobs: sweep interval must be at least 1s")
	case c.ReconcileInterval < time.Second:
		return errors.New("jobs: reconcile interval must be at least 1s")
	case c.BackfillInterval < time.Minute:
		return errors.New("jobs: backfill interval must be at least 1m")
	}
	return nil
}

// River's finished jobs: completed and cancelled ones kept a day by
// default, discarded ones (a dispatch whose retries ran out, for an
// operator to read) at least a week.
const (
	DefaultJobRetention   = 24 * time.Hour
	DiscardedJobRetention = 7 * 24 * time.Hour
)

// Client is Guardian's working River client: dispatch, sweep and reconcile
// workers, and the leader's periodic schedules.
type Client struct {
	river *river.Client[pgx.Tx]
}

// New returns a Client; Start runs it.
func New(cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	dispatch := &DispatchWorker{service: cfg.Service, tracer: cfg.Tracer}
	var actor string // "sweeper <River client id>", once River names the client
	maintainers := append(sweeps(cfg, &actor), pruners(cfg)...)
	maintain := &MaintainWorker{services: map[string]Maintainer{}, locker: cfg.Locker, metrics: cfg.Metrics, logger: cfg.Logger}
	for _, m := range maintainers {
		maintain.services[m.Name] = m
	}
	reconcile := &ReconcileWorker{service: cfg.Service, locker: cfg.Locker, logger: cfg.Logger}
	tally := &TallyWorker{folder: cfg.Tally, logger: cfg.Logger}
	workers := river.NewWorkers()
	route := &RouteWorker{service: cfg.Service}
	fill := &BackfillWorker{backfills: map[string]*backfill.Backfill{}, locker: cfg.Locker, logger: cfg.Logger}
	for _, b := range cfg.Backfills {
		fill.backfills[b.Provider()] = b
	}
	for _, add := range []func() error{
		func() error { return river.AddWorkerSafely(workers, dispatch) },
		func() error { return river.AddWorkerSafely(workers, maintain) },
		func() error { return river.AddWorkerSafely(workers, reconcile) },
		func() error { return river.AddWorkerSafely(workers, fill) },
		func() error { return river.AddWorkerSafely(workers, route) },
		func() error { return river.AddWorkerSafely(workers, tally) },
	} {
		if err := add(); err != nil {
			return nil, err
		}
	}

	var periodic []*river.PeriodicJob
	for _, m := range maintainers {
		periodic = append(periodic, m.periodic())
	}
	if cfg.Tally != nil {
		periodic = append(periodic, river.NewPeriodicJob(river.PeriodicInterval(TallyInterval),
			func() (river.JobArgs, *river.InsertOpts) { return TallyArgs{}, nil },
			&river.PeriodicJobOpts{ID: "guardian_tally", RunOnStart: true}))
	}
	if cfg.Service.Reconciles() {
		periodic = append(periodic, river.NewPeriodicJob(river.PeriodicInterval(cfg.ReconcileInterval),
			func() (river.JobArgs, *river.InsertOpts) { return ReconcileArgs{}, nil },
			&river.PeriodicJobOpts{ID: "guardian_reconcile", RunOnStart: true}))
	}
	for _, b := range cfg.Backfills {
		args := BackfillArgs{Provider: b.Provider()}
		periodic = append(periodic, river.NewPeriodicJob(river.PeriodicInterval(cfg.BackfillInterval),
			func() (river.JobArgs, *river.InsertOpts) { return args, nil },
			&river.PeriodicJobOpts{ID: "guardian_backfill_" + args.Provider, RunOnStart: true}))
	}
	rc, err := river.NewClient(riverpgxv5.New(cfg.Pool), &river.Config{
		ID:                   cfg.ID,
		Logger:               cfg.Logger.With("component", "river"),
		RescueStuckJobsAfter: cfg.Service.DispatchLease(),
		JobTimeout:           cfg.Service.ConnectorTimeout() + fulfilment.RecordMargin,
		FetchPollInterval:    cfg.FetchPollInterval,
		PollOnly:             cfg.pollOnly(),
		FetchCooldown:        min(cmp.Or(cfg.FetchPollInterval, FetchCooldown), FetchCooldown),
		Workers:              workers,
		Queues: map[string]river.QueueConfig{
			QueueDispatch:    {MaxWorkers: cfg.DispatchWorkers},
			QueueMaintenance: {MaxWorkers: 2},
			QueueRoute:       {MaxWorkers: routeWorkers},
		},
		PeriodicJobs: periodic,
		// River's own cleaner deletes finished jobs past these.
		CompletedJobRetentionPeriod: cmp.Or(cfg.JobRetention, DefaultJobRetention),
		CancelledJobRetentionPeriod: cmp.Or(cfg.JobRetention, DefaultJobRetention),
		DiscardedJobRetentionPeriod: max(cfg.JobRetention, DiscardedJobRetention),
	})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	dispatch.actor = func(jobID int64) string { return fmt.Sprintf("dispatcher %s job %d", rc.ID(), jobID) }
	actor = "sweeper " + rc.ID()
	reconcile.actor = "reconciler " + rc.ID()
	route.actor = func(jobID int64) string { return fmt.Sprintf("router %s job %d", rc.ID(), jobID) }
	return &Client{river: rc}, nil
}

// River returns the underlying River client, for River UI and tests.
func (c *Client) River() *river.Client[pgx.Tx] { return c.river }

// Start starts working jobs; it returns once River is running.
func (c *Client) Start(ctx context.Context) error {
	return c.river.Start(ctx)
}

// Stop stops fetching new jobs and waits for running ones to finish, until
// ctx ends; then it cancels what still runs. A dispatch cancelled mid-call
// parks its fulfilment as needs_reconciliation. Safe before Start and more
// than once.
func (c *Client) Stop(ctx context.Context) error {
	err := c.river.Stop(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return c.river.StopAndCancel(cctx)
	}
	return err
}

// sweepRound bounds one sweep's round.
const sweepRound = 30 * time.Second

// sweeps are the Maintainers of the protocol's scans that no event
// triggers (fulfilment.Service.ParkStale and its neighbours), each every
// SweepInterval; they write as *actor.
func sweeps(cfg Config, actor *string) []Maintainer {
	s := cfg.Service
	every := func(name string, run func(ctx context.Context, l lock.Lease) (int, error)) Maintainer {
		return Maintainer{Name: name, Interval: cfg.SweepInterval, Timeout: sweepRound, Run: run}
	}
	return []Maintainer{
		every("sweep_stale", func(ctx context.Context, l lock.Lease) (int, error) { return s.ParkStale(ctx, *actor, l) }),
		every("sweep_reversed", func(ctx context.Context, l lock.Lease) (int, error) { return s.TakeBackReversed(ctx, *actor, l) }),
		every("sweep_stranded", s.RequeueStranded),
		every("sweep_awaiting", s.RequeueAwaiting),
	}
}
