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

// SweepResult counts what one Sweep did.
type SweepResult struct {
	// Parked counts dispatching fulfilments whose lease ran out.
	Parked int
	// Requeued counts pending fulfilments that had no live dispatch job and
	// got a new one.
	Requeued int
	// Cancelled and Revoking count reversed payments' pending fulfilments
	// stopped (cancelled, or parked to ask the receiver when a lookup is
	// configured: reversedPending), and revocations created for fulfilled
	// ones.
	Cancelled, Revoking int
}

// strandedBatch caps the pending rows one sweep gives new jobs.
const strandedBatch = 1000

// Sweep does the periodic scans that no event triggers:
//
//   - It moves every fulfilment that has been dispatching for longer than
//     the dispatch lease to needs_reconciliation: a dispatcher that died
//     mid-call is noticed by a scan, not by an event a crash never sends.
//   - It takes back reversed payments (takeBack): a reversal that arrived
//     while the payment's fulfilment was in flight or parked is acted on
//     once the fulfilment settles. It reads the fulfilments settled since
//     its last round, and every reversed payment once an hour
//     (FullTakeBackEvery), whoever leads: where it stands is kept in the
//     database, written in the round's own transaction.
//   - It gives a new dispatch job to every pending fulfilment that has none
//     alive (River's retries exhausted, a job cancelled or deleted in River
//     UI, a job whose fetch answer was lost with its connection and that
//     sits "running" without ever claiming). A pending row waits at most a
//     job timeout (ConnectorTimeout plus RecordMargin) plus one sweep
//     interval for its job. A duplicate job is harmless: claims are
//     conditional, and a job finding another live claim leaves it alone.
//
// The caller holds lease on a lock; the sweep writes under its fencing
// number, so a sweeper that stalled past its lock's TTL finds its write
// refused (db.ErrStaleFence) instead of racing its successor.
func (s *Service) Sweep(ctx context.Context, actor string, lease lock.Lease) (SweepResult, error) {
	var moved []db.Fulfilment
	var requeued, cancelled, revoking []string
	err := s.cfg.Store.InTx(ctx, func(tx pgx.Tx) error {
		if err := db.CheckFence(ctx, tx, lease.Name, lease.Fence); err != nil {
			return err
		}
		var err error
		if moved, err = db.SweepStale(ctx, tx, s.cfg.DispatchLease, RecordMargin, actor, leaseExpired, s.dbNow()); err != nil {
			return err
		}
		// Reversals whose fulfilment settled since (a call in flight or
		// parked when the refund came) or raced it: taken back now.
		if cancelled, revoking, err = s.sweepTakeBack(ctx, tx, actor); err != nil {
			return err
		}
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
		return SweepResult{}, err
	}
	for _, id := range requeued {
		s.cfg.Logger.WarnContext(ctx, "sweep: pending fulfilment had no live dispatch job; enqueued one", "fulfilment_id", id)
	}
	to, _ := s.reversedPending()
	s.cfg.Metrics.Transition(state.Pending, to, len(cancelled))
	s.cfg.Metrics.Transition("", state.Pending, len(revoking))
	for _, id := range cancelled {
		s.cfg.Logger.InfoContext(ctx, "sweep: payment reversed before its fulfilment went out; not sent", "fulfilment_id", id, "state", to)
	}
	for _, id := range revoking {
		s.cfg.Logger.InfoContext(ctx, "sweep: fulfilled payment reversed; revocation created", "fulfilment_id", id)
	}
	s.cfg.Metrics.Transition(state.Dispatching, state.NeedsReconciliation, len(moved))
	for _, f := range moved {
		s.cfg.Logger.WarnContext(ctx, "sweep: dispatch lease expired; parked for reconciliation",
			"fulfilment_id", f.ID, "payment_id", f.PaymentID, "attempt", f.Attempt)
	}
	return SweepResult{Parked: len(moved), Requeued: len(requeued), Cancelled: len(cancelled), Revoking: len(revoking)}, nil
}
