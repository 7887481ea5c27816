package jobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/guardian-pay/guardian/app/lock"
	"github.com/guardian-pay/guardian/app/metrics"
	"github.com/guardian-pay/guardian/app/state"
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

// SweepWorker parks fulfilments whose dispatch lease expired, and prunes
// expired single-use tokens.
//
// River enqueues sweeps on its leader only, but any process may work one,
// and a slow sweep may still run when the next is due. A sweep therefore
// takes Guardian's "guardian_sweep" lock and writes under its fencing
// number: a sweeper that stalled past the lock's TTL finds its write refused
// instead of racing its successor.
type SweepWorker struct {
	river.WorkerDefaults[SweepArgs]

	store   *db.Store
	locker  lock.Locker
	lease   time.Duration
	logger  *slog.Logger
	metrics *metrics.Metrics
	actor   string
}

// sweepLockTTL bounds one sweep.
const sweepLockTTL = time.Minute

// tokenGrace keeps expired tokens' consumption records a day past expiry.
const tokenGrace = 24 * time.Hour

// Timeout ends a sweep before its lock expires.
func (w *SweepWorker) Timeout(*river.Job[SweepArgs]) time.Duration { return sweepLockTTL / 2 }

// Work sweeps once.
func (w *SweepWorker) Work(ctx context.Context, job *river.Job[SweepArgs]) error {
	return exclusive(ctx, w.locker, w.logger, "guardian_sweep", sweepLockTTL, func(l lock.Lease) error {
		var moved []db.Fulfilment
		err := w.store.InTx(ctx, func(tx pgx.Tx) error {
			if err := db.CheckFence(ctx, tx, "guardian_sweep", l.Fence); err != nil {
				return err
			}
			var err error
			moved, err = db.SweepStale(ctx, tx, w.lease, w.actor)
			return err
		})
		if err != nil {
			return err
		}
		w.metrics.Transition(string(state.Dispatching), string(state.NeedsReconciliation), len(moved))
		for _, f := range moved {
			w.logger.WarnContext(ctx, "sweep: dispatch lease expired; parked for reconciliation",
				"fulfilment_id", f.ID, "payment_id", f.PaymentID, "attempt", f.Attempt)
		}
		if n, err := db.PruneTokens(ctx, w.store.Pool(), time.Now().Add(-tokenGrace)); err != nil {
			w.logger.WarnContext(ctx, "sweep: prune tokens", "error", err)
		} else if n > 0 {
			w.logger.InfoContext(ctx, "sweep: pruned expired tokens", "rows", n)
		}
		return nil
	})
}
