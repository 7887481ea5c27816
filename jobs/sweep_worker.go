package jobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/guardian-pay/guardian/db"
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

// SweepWorker parks fulfilments whose dispatch lease expired.
type SweepWorker struct {
	river.WorkerDefaults[SweepArgs]

	store  *db.Store
	lease  time.Duration
	logger *slog.Logger
	actor  string
}

// Work sweeps once.
func (w *SweepWorker) Work(ctx context.Context, job *river.Job[SweepArgs]) error {
	moved, err := db.SweepStale(ctx, w.store.Pool(), w.lease, w.actor)
	if err != nil {
		return err
	}
	for _, f := range moved {
		w.logger.WarnContext(ctx, "sweep: dispatch lease expired; parked for reconciliation",
			"fulfilment_id", f.ID, "payment_id", f.PaymentID, "attempt", f.Attempt)
	}
	return nil
}
