package jobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/guardian-pay/guardian/app/lock"
	"github.com/guardian-pay/guardian/app/metrics"
	"github.com/guardian-pay/guardian/app/refusals"
	"github.com/guardian-pay/guardian/db"
)

// MaintenanceArgs asks for one round of housekeeping: expired single-use
// tokens and old refused-request records pruned.
type MaintenanceArgs struct{}

// Kind names the job in River.
func (MaintenanceArgs) Kind() string { return "guardian_maintenance" }

// InsertOpts puts housekeeping on the maintenance queue, without retries:
// the next period prunes again.
func (MaintenanceArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, MaxAttempts: 1}
}

// BodyPruner empties event bodies older than a time that nothing can need
// again, a batch at a time (db.Store.PruneEventBodies): done says the walk
// reached the time.
type BodyPruner interface {
	PruneEventBodies(ctx context.Context, before time.Time, limit int) (pruned int, done bool, err error)
}

// pruneBatch is how many events one prune statement walks: a short
// transaction, so intake never waits long on it.
const pruneBatch = 1000

// TokenPruner deletes single-use token records that expired before a time.
type TokenPruner interface {
	Prune(ctx context.Context, before time.Time) (int64, error)
}

// RefusalPruner deletes what the webhook edge records of deliveries:
// refused-request records older than a time and beyond a count
// (db.Store.PruneRefusals), and signed transmissions' bindings older than
// a time (db.Store.PruneTransmissions).
type RefusalPruner interface {
	PruneRefusals(ctx context.Context, before time.Time, keep int) (int64, error)
	PruneTransmissions(ctx context.Context, before time.Time) (int64, error)
}

// DefaultMaintenanceInterval is how often the leader prunes.
const DefaultMaintenanceInterval = 10 * time.Minute

// TokenGrace keeps expired tokens' consumption records a day past expiry.
const TokenGrace = 24 * time.Hour

// maintenanceRound bounds one round.
const maintenanceRound = 150 * time.Second

// MaintenanceWorker prunes what only grows otherwise: expired single-use
// tokens (a day after expiry) and refused-request records (past
// refusals.Retention, beyond refusals.Rows). It does one thing on the leader,
// apart from the sweep, as River keeps its cleaner apart from its rescuer:
// a slow delete never delays parking a stale claim.
type MaintenanceWorker struct {
	river.WorkerDefaults[MaintenanceArgs]

	tokens   TokenPruner
	refusals RefusalPruner
	bodies   BodyPruner
	// retention is how long event bodies are kept; 0 keeps them.
	retention time.Duration
	metrics   *metrics.Metrics
	locker    lock.Locker
	logger    *slog.Logger
}

// Timeout ends a round that runs too long.
func (w *MaintenanceWorker) Timeout(*river.Job[MaintenanceArgs]) time.Duration {
	return maintenanceRound
}

// Work prunes once. A pruner that fails is logged; the next round tries
// again.
func (w *MaintenanceWorker) Work(ctx context.Context, job *river.Job[MaintenanceArgs]) error {
	return exclusive(ctx, w.locker, w.logger, "guardian_maintenance", leaseTTL, func(ctx context.Context, _ lock.Lease) error {
		if w.tokens != nil {
			if n, err := w.tokens.Prune(ctx, time.Now().Add(-TokenGrace)); err != nil {
				w.logger.WarnContext(ctx, "maintenance: prune tokens", "error", err)
			} else if n > 0 {
				w.logger.InfoContext(ctx, "maintenance: pruned expired tokens", "rows", n)
			}
		}
		if w.refusals != nil {
			if n, err := w.refusals.PruneRefusals(ctx, time.Now().Add(-refusals.Retention), refusals.Rows); err != nil {
				w.logger.WarnContext(ctx, "maintenance: prune refused requests", "error", err)
			} else if n > 0 {
				w.logger.InfoContext(ctx, "maintenance: pruned refused-request records", "rows", n)
			}
			if n, err := w.refusals.PruneTransmissions(ctx, time.Now().Add(-db.TransmissionRetention)); err != nil {
				w.logger.WarnContext(ctx, "maintenance: prune signed transmissions", "error", err)
			} else if n > 0 {
				w.logger.InfoContext(ctx, "maintenance: pruned signed transmissions", "rows", n)
			}
		}
		if w.bodies != nil && w.retention > 0 {
			w.pruneBodies(ctx, time.Now().Add(-w.retention))
		}
		return nil
	})
}

// pruneBodies empties the bodies of events seen before before, a batch at
// a time, until the walk reaches it or the round's time runs out (the next
// round goes on from there).
func (w *MaintenanceWorker) pruneBodies(ctx context.Context, before time.Time) {
	total := 0
	for ctx.Err() == nil {
		n, done, err := w.bodies.PruneEventBodies(ctx, before, pruneBatch)
		if err != nil {
			w.logger.WarnContext(ctx, "maintenance: prune event bodies", "error", err)
			break
		}
		total += n
		w.metrics.Pruned(n)
		if done {
			break
		}
	}
	if total > 0 {
		w.logger.InfoContext(ctx, "maintenance: emptied event bodies past the payload retention", "events", total, "before", before)
	}
}
