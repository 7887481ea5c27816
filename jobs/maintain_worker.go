package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/guardian-pay/guardian/app/lock"
	"github.com/guardian-pay/guardian/app/metrics"
)

// A Maintainer is one of the leader's periodic services, each doing one
// thing, the way River's cleaner, rescuer and reindexer each do: the three
// sweeps of the protocol (fulfilment.Service's ParkStale,
// TakeBackReversed, RequeueStranded) and the pruners of what only grows
// otherwise (Pruners). Every one runs on MaintainWorker, the one periodic
// adapter: its own interval, its own lock ("guardian_" + Name), and its
// own label on guardian_maintenance_runs_total and
// guardian_maintenance_rows_total.
type Maintainer struct {
	// Name names the service in its lock, its periodic job, its logs and
	// its metrics ("sweep_stale").
	Name string
	// Interval is how often the leader runs it.
	Interval time.Duration
	// Timeout bounds one round.
	Timeout time.Duration
	// Run does one round under lease, writing under its fencing number
	// where it writes the protocol's rows, and returns the rows it moved,
	// requeued or pruned.
	Run func(ctx context.Context, lease lock.Lease) (int, error)
}

// MaintainArgs asks for one round of the named Maintainer.
type MaintainArgs struct {
	Service string `json:"service"`
}

// Kind names the job in River.
func (MaintainArgs) Kind() string { return "guardian_maintain" }

// InsertOpts puts rounds on the maintenance queue, without retries: every
// round is idempotent, and the next period runs again.
func (MaintainArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, MaxAttempts: 1}
}

// MaintainWorker runs a Maintainer's round. River enqueues the rounds on
// its leader only, but any process may work one, and a slow round may
// still run when the next is due: a round takes its service's lock, and a
// held lock skips it.
type MaintainWorker struct {
	river.WorkerDefaults[MaintainArgs]

	services map[string]Maintainer
	locker   lock.Locker
	metrics  *metrics.Metrics
	logger   *slog.Logger
}

// Timeout ends a round that runs longer than its service allows.
func (w *MaintainWorker) Timeout(job *river.Job[MaintainArgs]) time.Duration {
	return w.services[job.Args.Service].Timeout
}

// Work runs one round of the job's service.
func (w *MaintainWorker) Work(ctx context.Context, job *river.Job[MaintainArgs]) error {
	m, ok := w.services[job.Args.Service]
	if !ok {
		return river.JobCancel(fmt.Errorf("no maintenance service %q in this process", job.Args.Service))
	}
	return exclusive(ctx, w.locker, w.logger, "guardian_"+m.Name, leaseTTL, func(ctx context.Context, l lock.Lease) error {
		n, err := m.Run(ctx, l)
		w.metrics.Maintained(m.Name, n, err)
		if err != nil {
			w.logger.WarnContext(ctx, "maintenance round failed; the next one tries again", "service", m.Name, "error", err)
		}
		return err
	})
}

// periodic is the service's schedule on the leader.
func (m Maintainer) periodic() *river.PeriodicJob {
	args := MaintainArgs{Service: m.Name}
	return river.NewPeriodicJob(river.PeriodicInterval(m.Interval),
		func() (river.JobArgs, *river.InsertOpts) { return args, nil },
		&river.PeriodicJobOpts{ID: "guardian_" + m.Name, RunOnStart: true})
}
