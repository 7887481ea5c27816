package jobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/lock"
)

// ReconcileArgs asks for one round of lookups on parked fulfilments.
type ReconcileArgs struct{}

// Kind names the job in River.
func (ReconcileArgs) Kind() string { return "guardian_reconcile" }

// InsertOpts puts reconciliation on the maintenance queue; a failed round
// is not retried, the next period runs again.
func (ReconcileArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, MaxAttempts: 1}
}

// ReconcileWorker runs fulfilment.Service.Reconcile: River schedules it on
// its elected leader only. Rounds do not overlap: a round holds the
// "guardian_reconcile" lock, and one that finds it held does nothing, so a
// parked row is never looked up twice at once.
type ReconcileWorker struct {
	river.WorkerDefaults[ReconcileArgs]

	service *fulfilment.Service
	locker  lock.Locker
	logger  *slog.Logger
	actor   string
}

// reconcileRound bounds one round; what it leaves waits for the next.
const reconcileRound = time.Minute

// Timeout ends a round that runs too long.
func (w *ReconcileWorker) Timeout(*river.Job[ReconcileArgs]) time.Duration { return reconcileRound }

// Work runs one round.
func (w *ReconcileWorker) Work(ctx context.Context, job *river.Job[ReconcileArgs]) error {
	return exclusive(ctx, w.locker, w.logger, "guardian_reconcile", leaseTTL, func(ctx context.Context, _ lock.Lease) error {
		sum, err := w.service.Reconcile(ctx, w.actor)
		if sum.Checked > 0 {
			w.logger.InfoContext(ctx, "reconcile: round done", "checked", sum.Checked, "fulfilled", sum.Fulfilled,
				"redispatched", sum.Redispatched, "failed", sum.Failed, "cancelled", sum.Cancelled, "undecided", sum.Undecided)
		}
		return err
	})
}
