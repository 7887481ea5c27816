package jobs

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/guardian-pay/guardian/app/lock"
	"github.com/guardian-pay/guardian/app/refusals"
	"github.com/guardian-pay/guardian/db"
)

// BodyPruner empties event bodies older than a time that nothing can need
// again, a batch at a time (db.Store.PruneEventBodies): done says the walk
// reached the time.
type BodyPruner interface {
	PruneEventBodies(ctx context.Context, before time.Time, limit int) (pruned int, done bool, err error)
}

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

// DefaultPruneInterval is how often the leader runs each pruner.
const DefaultPruneInterval = 10 * time.Minute

// TokenGrace keeps expired tokens' consumption records a day past expiry.
const TokenGrace = 24 * time.Hour

// pruneRound bounds one pruner's round.
const pruneRound = 150 * time.Second

// pruneBatch is how many events one prune statement walks: a short
// transaction, so intake never waits long on it.
const pruneBatch = 1000

// pruners are the Maintainers that prune what only grows otherwise, each
// a table: expired single-use tokens (a day after expiry), refused-request
// records (past refusals.Retention, beyond refusals.Rows), signed
// transmissions' bindings (past db.TransmissionRetention) and event bodies
// (past the payload retention). One whose store is not configured is left
// out.
func pruners(cfg Config) []Maintainer {
	every := func(name string, run func(context.Context) (int, error)) Maintainer {
		return Maintainer{Name: name, Interval: cmp.Or(cfg.PruneInterval, DefaultPruneInterval), Timeout: pruneRound,
			Run: func(ctx context.Context, _ lock.Lease) (int, error) { return run(ctx) }}
	}
	var out []Maintainer
	if cfg.Tokens != nil {
		out = append(out, every("prune_tokens", func(ctx context.Context) (int, error) {
			n, err := cfg.Tokens.Prune(ctx, time.Now().Add(-TokenGrace))
			return int(n), err
		}))
	}
	if cfg.Refusals != nil {
		out = append(out, every("prune_refusals", func(ctx context.Context) (int, error) {
			n, err := cfg.Refusals.PruneRefusals(ctx, time.Now().Add(-refusals.Retention), refusals.Rows)
			return int(n), err
		}), every("prune_transmissions", func(ctx context.Context) (int, error) {
			n, err := cfg.Refusals.PruneTransmissions(ctx, time.Now().Add(-db.TransmissionRetention))
			return int(n), err
		}))
	}
	if cfg.Bodies != nil && cfg.PayloadRetention > 0 {
		out = append(out, every("prune_bodies", func(ctx context.Context) (int, error) {
			return pruneBodies(ctx, cfg.Bodies, time.Now().Add(-cfg.PayloadRetention), cfg.Logger)
		}))
	}
	return out
}

// pruneBodies empties the bodies of events seen before before, a batch at
// a time, until the walk reaches it or the round's time runs out (the next
// round goes on from there).
func pruneBodies(ctx context.Context, bodies BodyPruner, before time.Time, logger *slog.Logger) (total int, err error) {
	defer func() {
		if total > 0 {
			logger.InfoContext(ctx, "maintenance: emptied event bodies past the payload retention", "events", total, "before", before)
		}
	}()
	for ctx.Err() == nil {
		n, done, err := bodies.PruneEventBodies(ctx, before, pruneBatch)
		total += n
		if err != nil || done {
			return total, err
		}
	}
	return total, nil
}

// Retention is how long each kind of record is kept (0: for good), as the
// pruners and River's cleaner keep them under a payload retention and a
// job retention (docs/operations.md, "What Guardian keeps").
func Retention(payload, finishedJobs time.Duration) map[string]time.Duration {
	return map[string]time.Duration{
		"event": 0, "event_body": payload, "fulfilment": 0, "transition": 0,
		"completed_job": cmp.Or(finishedJobs, DefaultJobRetention), "discarded_job": max(finishedJobs, DiscardedJobRetention),
		"refused_delivery": refusals.Retention, "single_use_token": TokenGrace,
		"dispatch_outcome_minute": db.OutcomeRetention,
	}
}
