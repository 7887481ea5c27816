package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/lock"
	"github.com/guardian-pay/guardian/app/metrics"
	"github.com/guardian-pay/guardian/app/reconcile"
	"github.com/guardian-pay/guardian/db"
)

// Queue names. Maintenance work has its own queue so a backlog of
// dispatches never delays the sweep.
const (
	QueueDispatch    = "dispatch"
	QueueMaintenance = "maintenance"
)

// Config configures Guardian's River client.
type Config struct {
	Pool      *pgxpool.Pool
	Connector connector.Connector
	Logger    *slog.Logger
	// ConnectorTimeout bounds one connector call. Defaults to 30 seconds.
	ConnectorTimeout time.Duration
	// DispatchLease is how long a fulfilment may stay dispatching before the
	// sweep parks it; River's stuck-job rescue uses the same span. It must
	// exceed ConnectorTimeout plus the time to record the outcome. Defaults
	// to 5 minutes.
	DispatchLease time.Duration
	// SweepInterval is how often the leader sweeps. Defaults to 30 seconds.
	SweepInterval time.Duration
	// DispatchWorkers is how many dispatches run at once in this process.
	// Defaults to 50.
	DispatchWorkers int
	// ID names this process in River and in transition logs. Defaults to
	// River's generated id.
	ID string
	// FetchPollInterval is how often River polls when LISTEN/NOTIFY is quiet.
	// Defaults to River's default (1 second); a shorter one also shortens
	// River's fetch cooldown to match.
	FetchPollInterval time.Duration
	// Workless, when true, makes a client that only inserts jobs.
	Workless bool

	// Looker, when set, lets the reconciler resolve parked fulfilments by
	// asking the connector. Nil leaves them to operators.
	Looker connector.Looker
	// ReconcileInterval is how often the leader runs the reconciler.
	// Defaults to 1 minute.
	ReconcileInterval time.Duration
	// ReconcileGrace is how long a row stays parked before its first
	// lookup. Defaults to 1 minute.
	ReconcileGrace time.Duration
	// ReconcileBackoff is the wait after a first undecided lookup; it doubles
	// up to 1 hour. Defaults to 1 minute.
	ReconcileBackoff time.Duration
	// Metrics records dispatches and transitions; nil records nothing.
	Metrics *metrics.Metrics
	// Tracer traces each dispatch; nil traces nothing.
	Tracer trace.Tracer
}

// FetchCooldown is the pause between River fetches while jobs are waiting.
// River's default (100 ms) with 50 workers caps a process at 500 jobs/s;
// 20 ms lifts that cap above what Postgres commits on a small machine, and
// costs nothing when the queue is empty (River then waits for a notification).
const FetchCooldown = 20 * time.Millisecond

// recordMargin is the time a dispatch job keeps, past the connector's
// timeout, to record the outcome.
const recordMargin = 15 * time.Second

func (c *Config) withDefaults() Config {
	out := *c
	out.ConnectorTimeout = cmp.Or(out.ConnectorTimeout, 30*time.Second)
	out.DispatchLease = cmp.Or(out.DispatchLease, 5*time.Minute)
	out.SweepInterval = cmp.Or(out.SweepInterval, 30*time.Second)
	out.DispatchWorkers = cmp.Or(out.DispatchWorkers, 50)
	out.ReconcileInterval = cmp.Or(out.ReconcileInterval, time.Minute)
	return out
}

func (c *Config) validate() error {
	switch {
	case c.Pool == nil:
		return errors.New("jobs: pool is required")
	case c.Logger == nil:
		return errors.New("jobs: logger is required")
	case !c.Workless && c.Connector == nil:
		return errors.New("jobs: connector is required")
	case c.DispatchLease <= c.ConnectorTimeout+recordMargin:
		return fmt.Errorf("jobs: dispatch lease %s must exceed the connector timeout %s plus %s to record the outcome",
			c.DispatchLease, c.ConnectorTimeout, recordMargin)
	case c.SweepInterval < time.Second:
		return errors.New("jobs: sweep interval must be at least 1s")
	case c.ReconcileInterval < time.Second:
		return errors.New("jobs: reconcile interval must be at least 1s")
	}
	return nil
}

// Client is Guardian's River client with its workers registered.
type Client struct {
	river      *river.Client[pgx.Tx]
	reconciler *reconcile.Service
	workless   bool
}

// New returns a Client; Start runs it.
func New(cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	store := db.New(cfg.Pool)
	c := &Client{}
	reconciler, err := reconcile.New(reconcile.Config{
		Store: store, Enqueuer: c, Logger: cfg.Logger, Looker: cfg.Looker,
		Grace: cfg.ReconcileGrace, Backoff: cfg.ReconcileBackoff, LookupTimeout: cfg.ConnectorTimeout,
		Metrics: cfg.Metrics,
	})
	if err != nil {
		return nil, err
	}
	c.reconciler = reconciler
	workers := river.NewWorkers()
	tracer := cfg.Tracer
	if tracer == nil {
		tracer = noop.NewTracerProvider().Tracer("guardian")
	}
	dispatch := &DispatchWorker{store: store, connector: cfg.Connector, timeout: cfg.ConnectorTimeout, logger: cfg.Logger, metrics: cfg.Metrics, tracer: tracer}
	locker := lock.Postgres{Store: store}
	sweep := &SweepWorker{store: store, locker: locker, lease: cfg.DispatchLease, logger: cfg.Logger, metrics: cfg.Metrics}
	reconcileWorker := &ReconcileWorker{reconciler: reconciler, locker: locker, logger: cfg.Logger}
	if err := river.AddWorkerSafely(workers, dispatch); err != nil {
		return nil, err
	}
	if err := river.AddWorkerSafely(workers, sweep); err != nil {
		return nil, err
	}
	if err := river.AddWorkerSafely(workers, reconcileWorker); err != nil {
		return nil, err
	}

	rcfg := &river.Config{
		ID:                   cfg.ID,
		Logger:               cfg.Logger.With("component", "river"),
		RescueStuckJobsAfter: cfg.DispatchLease,
		JobTimeout:           cfg.ConnectorTimeout + recordMargin,
		FetchPollInterval:    cfg.FetchPollInterval,
		FetchCooldown:        min(cmp.Or(cfg.FetchPollInterval, FetchCooldown), FetchCooldown),
		Workers:              workers,
	}
	if !cfg.Workless {
		rcfg.Queues = map[string]river.QueueConfig{
			QueueDispatch:    {MaxWorkers: cfg.DispatchWorkers},
			QueueMaintenance: {MaxWorkers: 2},
		}
		rcfg.PeriodicJobs = []*river.PeriodicJob{
			river.NewPeriodicJob(river.PeriodicInterval(cfg.SweepInterval),
				func() (river.JobArgs, *river.InsertOpts) { return SweepArgs{}, nil },
				&river.PeriodicJobOpts{ID: "guardian_sweep", RunOnStart: true}),
		}
		if cfg.Looker != nil {
			rcfg.PeriodicJobs = append(rcfg.PeriodicJobs, river.NewPeriodicJob(river.PeriodicInterval(cfg.ReconcileInterval),
				func() (river.JobArgs, *river.InsertOpts) { return ReconcileArgs{}, nil },
				&river.PeriodicJobOpts{ID: "guardian_reconcile", RunOnStart: true}))
		}
	}
	rc, err := river.NewClient(riverpgxv5.New(cfg.Pool), rcfg)
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	dispatch.actor = func(jobID int64) string { return fmt.Sprintf("dispatcher %s job %d", rc.ID(), jobID) }
	sweep.actor = "sweeper " + rc.ID()
	reconcileWorker.actor = "reconciler " + rc.ID()
	c.river = rc
	c.workless = cfg.Workless
	return c, nil
}

// Reconciler returns the service that resolves parked fulfilments, for the
// operator API.
func (c *Client) Reconciler() *reconcile.Service { return c.reconciler }

// River returns the underlying River client, for River UI and tests.
func (c *Client) River() *river.Client[pgx.Tx] { return c.river }

// Start starts working jobs; it returns once River is running. A workless
// client only inserts, and needs no start.
func (c *Client) Start(ctx context.Context) error {
	if c.workless {
		return nil
	}
	return c.river.Start(ctx)
}

// Stop stops fetching new jobs and waits for running ones to finish, until
// ctx ends; then it cancels what still runs. A dispatch cancelled mid-call
// parks its fulfilment as needs_reconciliation. Safe before Start and more
// than once.
func (c *Client) Stop(ctx context.Context) error {
	if c.workless {
		return nil
	}
	err := c.river.Stop(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return c.river.StopAndCancel(cctx)
	}
	return err
}

// EnqueueDispatchTx inserts a fulfilment's dispatch job in tx.
func (c *Client) EnqueueDispatchTx(ctx context.Context, tx pgx.Tx, fulfilmentID string) error {
	_, err := c.river.InsertTx(ctx, tx, DispatchArgs{FulfilmentID: fulfilmentID}, nil)
	return err
}
