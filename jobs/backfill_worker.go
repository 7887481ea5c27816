package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/guardian-pay/guardian/app/backfill"
	"github.com/guardian-pay/guardian/app/lock"
)

// BackfillArgs asks for one backfill run from a provider's events API.
type BackfillArgs struct {
	Provider string `json:"provider"`
}

// Kind names the job in River.
func (BackfillArgs) Kind() string { return "guardian_backfill" }

// InsertOpts puts backfills on the maintenance queue; a failed run is not
// retried, the next period runs again from the same checkpoint.
func (BackfillArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, MaxAttempts: 1}
}

// BackfillWorker runs a provider's backfill.Backfill.Run on the leader's
// schedule, under the "guardian_backfill_<provider>" lock so one provider's
// runs never overlap.
type BackfillWorker struct {
	river.WorkerDefaults[BackfillArgs]

	backfills map[string]*backfill.Backfill
	locker    lock.Locker
	logger    *slog.Logger
}

// backfillRun bounds one run; the checkpoint keeps what it got through.
const backfillRun = 10 * time.Minute

// Timeout ends a run that runs too long.
func (w *BackfillWorker) Timeout(*river.Job[BackfillArgs]) time.Duration { return backfillRun }

// Work runs one backfill.
func (w *BackfillWorker) Work(ctx context.Context, job *river.Job[BackfillArgs]) error {
	b, ok := w.backfills[job.Args.Provider]
	if !ok {
		// A job left by a deployment that had this provider's API key: not
		// retried, nothing to do.
		return river.JobCancel(fmt.Errorf("no backfill is configured for provider %q", job.Args.Provider))
	}
	return exclusive(ctx, w.locker, w.logger, "guardian_backfill_"+b.Provider(), leaseTTL, func(ctx context.Context, _ lock.Lease) error {
		_, err := b.Run(ctx, time.Time{})
		return err
	})
}
