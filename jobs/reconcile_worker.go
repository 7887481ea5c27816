package jobs

import (
	"context"
	"log/slog"

	"github.com/riverqueue/river"

	"github.com/guardian-pay/guardian/app/reconcile"
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

// ReconcileWorker runs the automatic resolver: River schedules it on its
// elected leader only.
type ReconcileWorker struct {
	river.WorkerDefaults[ReconcileArgs]

	reconciler *reconcile.Service
	logger     *slog.Logger
	actor      string
}

// Work runs one round.
func (w *ReconcileWorker) Work(ctx context.Context, job *river.Job[ReconcileArgs]) error {
	sum, err := w.reconciler.RunChecks(ctx, w.actor)
	if sum.Checked > 0 {
		w.logger.InfoContext(ctx, "reconcile: round done", "checked", sum.Checked, "fulfilled", sum.Fulfilled,
			"redispatched", sum.Redispatched, "undecided", sum.Undecided)
	}
	return err
}
