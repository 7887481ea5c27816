package jobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/guardian-pay/guardian/app/backfill"
	"github.com/guardian-pay/guardian/app/lock"
)

// BackfillArgs asks for one Stripe backfill run.
type BackfillArgs struct{}

// Kind names the job in River.
func (BackfillArgs) Kind() string { return "guardian_backfill_stripe" }

// InsertOpts puts backfills on the maintenance queue; a failed run is not
// retried, the next period runs again from the same checkpoint.
func (BackfillArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, MaxAttempts: 1}
}

// BackfillWorker runs backfill.Stripe.Run on the leader's schedule, under
// the "guardian_backfill_stripe" lock so runs never overlap.
type BackfillWorker struct {
	river.WorkerDefaults[BackfillArgs]

	backfill *backfill.Stripe
	locker   lock.Locker
	logger   *slog.Logger
}

// backfillRun bounds one run; the checkpoint keeps what it got through.
const backfillRun = 10 * time.Minute

// Timeout ends a run that runs too long.
func (w *BackfillWorker) Timeout(*river.Job[BackfillArgs]) time.Duration { return backfillRun }

// Work runs one backfill.
func (w *BackfillWorker) Work(ctx context.Context, job *river.Job[BackfillArgs]) error {
	return exclusive(ctx, w.locker, w.logger, "guardian_backfill_stripe", leaseTTL, func(ctx context.Context, _ lock.Lease) error {
		_, err := w.backfill.Run(ctx, time.Time{})
		return err
	})
}
