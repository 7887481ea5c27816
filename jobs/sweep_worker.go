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

// TokenPruner deletes single-use token records that expired before a time.
type TokenPruner interface {
	Prune(ctx context.Context, before time.Time) (int64, error)
}

// RefusalPruner deletes refused-request records older than a time and
// beyond a count (db.Store.PruneRefusals).
type RefusalPruner interface {
	PruneRefusals(ctx context.Context, before time.Time, keep int) (int64, error)
}

// The refused-request record's bounds.
const (
	RefusalRetention = 7 * 24 * time.Hour
	RefusalRows      = 100_000
)

// SweepWorker runs fulfilment.Service.Sweep, and prunes expired single-use
// tokens and old refused-request records.
//
// River enqueues sweeps on its leader only, but any process may work one,
// and a slow sweep may still run when the next is due. A sweep therefore
// takes Guardian's "guardian_sweep" lock, and the domain writes under its
// fencing number.
type SweepWorker struct {
	river.WorkerDefaults[SweepArgs]

	service  *fulfilment.Service
	tokens   TokenPruner
	refusals RefusalPruner
	locker   lock.Locker
	logger   *slog.Logger
	actor    string
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
		if _, err := w.service.Sweep(ctx, w.actor, l); err != nil {
			return err
		}
		if w.tokens != nil {
			if n, err := w.tokens.Prune(ctx, time.Now().Add(-tokenGrace)); err != nil {
				w.logger.WarnContext(ctx, "sweep: prune tokens", "error", err)
			} else if n > 0 {
				w.logger.InfoContext(ctx, "sweep: pruned expired tokens", "rows", n)
			}
		}
		if w.refusals != nil {
			if n, err := w.refusals.PruneRefusals(ctx, time.Now().Add(-RefusalRetention), RefusalRows); err != nil {
				w.logger.WarnContext(ctx, "sweep: prune refused requests", "error", err)
			} else if n > 0 {
				w.logger.InfoContext(ctx, "sweep: pruned refused-request records", "rows", n)
			}
		}
		return nil
	})
}
