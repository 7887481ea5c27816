package jobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/lock"
)

// SweepArgs asks for one sweep of stale dispatching fulfilments.
type SweepArgs struct{}

// Kind names the job in River.
func (SweepArgs) Kind() string { return "guardian_sweep" }

// InsertOpts puts sweeps on the maintenance queue. A sweep is idempotent, so
// a failed one is not retried: the next period sweeps again.
func (SweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, MaxAttempts: 1}
}

// SweepWorker runs fulfilment.Service.Sweep: stale claims parked, stranded
// pending rows given a job. (Pruning is MaintenanceWorker's.)
//
// River enqueues sweeps on its leader only, but any process may work one,
// and a slow sweep may still run when the next is due. A sweep therefore
// takes Guardian's "guardian_sweep" lock, and the domain writes under its
// fencing number.
type SweepWorker struct {
	river.WorkerDefaults[SweepArgs]

	service *fulfilment.Service
	locker  lock.Locker
	logger  *slog.Logger
	actor   string
}

// sweepRound bounds one sweep.
const sweepRound = 30 * time.Second

// Timeout ends a sweep that runs too long.
func (w *SweepWorker) Timeout(*river.Job[SweepArgs]) time.Duration { return sweepRound }

// Work sweeps once.
func (w *SweepWorker) Work(ctx context.Context, job *river.Job[SweepArgs]) error {
	return exclusive(ctx, w.locker, w.logger, "guardian_sweep", leaseTTL, func(ctx context.Context, l lock.Lease) error {
		_, err := w.service.Sweep(ctx, w.actor, l)
		return err
	})
}
