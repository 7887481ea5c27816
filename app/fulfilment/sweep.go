package fulfilment

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/lock"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

// leaseExpired is the reason the sweep parks a claim past its lease.
const leaseExpired = "dispatch lease expired: the connector call may or may not have happened"

// strandedBatch caps the pending rows one sweep gives new jobs.
const strandedBatch = 1000

// The sweeps are the scans no event triggers, each its own service on
// the leader (jobs runs them, each on its interval, under its own lock):
//
//   - ParkStale moves every fulfilment dispatching for longer than the
//     dispatch lease to needs_reconciliation: a dispatcher that died
//     mid-call is noticed by a scan, not by an event a crash never sends.
//   - TakeBackReversed takes back reversed payments (takeBack): a reversal
//     that arrived while the payment's fulfilment was in flight or parked
//     is acted on once the fulfilment settles. It reads the fulfilments
//     settled since its last round, and every reversed payment once an
//     hour (FullTakeBackEvery), whoever leads: where it stands is kept in
//     the database, written in the round's own transaction.
//   - RequeueStranded gives a new dispatch job to every pending
//     fulfilment that has none alive (River's retries exhausted, a job
//     cancelled or deleted in River UI, a job whose fetch answer was lost
//     with its connection and that sits "running" without ever claiming).
//     A pending row waits at most a job timeout (ConnectorTimeout plus
//     RecordMargin) plus one interval for its job. A duplicate job is
//     harmless: claims are conditional, and a job finding another live
//     claim leaves it alone.
//
// Each is one transaction, written under the fencing number of the lease
// its caller holds, so a sweeper that stalled past its lock's TTL finds
// its write refused (db.ErrStaleFence) instead of racing its successor.
// Each returns the rows it moved or gave a job.

// ParkStale parks the claims whose dispatch lease ran out.
func (s *Service) ParkStale(ctx context.Context, actor string, lease lock.Lease) (int, error) {
	var moved []db.Fulfilment
	err := s.fenced(ctx, lease, func(tx pgx.Tx) (err error) {
		moved, err = db.SweepStale(ctx, tx, s.cfg.DispatchLease, RecordMargin, actor, leaseExpired, s.dbNow())
		return err
	})
	if err != nil {
		return 0, err
	}
	for _, f := range moved {
		s.cfg.Metrics.Transition(f.ActionName, state.Dispatching, state.NeedsReconciliation, 1)
		s.cfg.Logger.WarnContext(ctx, "sweep: dispatch lease expired; parked for reconciliation",
			"fulfilment_id", f.ID, "payment_id", f.PaymentID, "attempt", f.Attempt)
	}
	return len(moved), nil
}

// TakeBackReversed takes back the reversed payments whose fulfilment
// settled since its last round (or all of them, once an hour): a pending
// fulfilment of a reversed payment is stopped (reversedPending), a
// fulfilled one gets its revocation (per action, by its policy).
func (s *Service) TakeBackReversed(ctx context.Context, actor string, lease lock.Lease) (int, error) {
	var stopped map[state.State][]string
	var revoking []string
	err := s.fenced(ctx, lease, func(tx pgx.Tx) (err error) {
		stopped, revoking, err = s.sweepTakeBack(ctx, tx, actor)
		return err
	})
	if err != nil {
		return 0, err
	}
	n := len(revoking)
	for to, ids := range stopped {
		n += len(ids)
		s.countMoved(ctx, state.Pending, to, ids)
		for _, id := range ids {
			s.cfg.Logger.InfoContext(ctx, "sweep: payment reversed before its fulfilment went out; not sent", "fulfilment_id", id, "state", to)
		}
	}
	s.countMoved(ctx, "", state.Pending, revoking)
	for _, id := range revoking {
		s.cfg.Logger.InfoContext(ctx, "sweep: fulfilled payment reversed; revocation created", "fulfilment_id", id)
	}
	return n, nil
}

// RequeueStranded gives the pending fulfilments that have no live
// dispatch job a new one, at most strandedBatch a round.
func (s *Service) RequeueStranded(ctx context.Context, lease lock.Lease) (int, error) {
	var requeued []string
	err := s.fenced(ctx, lease, func(tx pgx.Tx) (err error) {
		if requeued, err = db.StrandedPending(ctx, tx, s.cfg.Enqueuer.DispatchJobs(), s.cfg.ConnectorTimeout+RecordMargin, strandedBatch); err != nil {
			return err
		}
		for _, id := range requeued {
			if err := s.cfg.Enqueuer.EnqueueDispatchTx(ctx, tx, id); err != nil {
				return fmt.Errorf("requeue %s: %w", id, err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, id := range requeued {
		s.cfg.Logger.WarnContext(ctx, "sweep: pending fulfilment had no live dispatch job; enqueued one", "fulfilment_id", id)
	}
	return len(requeued), nil
}

// fenced runs fn in a transaction that first checks lease's fencing
// number.
func (s *Service) fenced(ctx context.Context, lease lock.Lease, fn func(pgx.Tx) error) error {
	return s.cfg.Store.InTx(ctx, func(tx pgx.Tx) error {
		if err := db.CheckFence(ctx, tx, lease.Name, lease.Fence); err != nil {
			return err
		}
		return fn(tx)
	})
}
