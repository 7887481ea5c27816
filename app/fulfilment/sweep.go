package fulfilment

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/lock"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

// SweepResult counts what one Sweep moved.
type SweepResult struct {
	// Parked counts dispatching fulfilments whose lease ran out.
	Parked int
}

// Sweep moves every fulfilment that has been dispatching for longer than
// the dispatch lease to needs_reconciliation: a dispatcher that died
// mid-call is noticed by a scan, not by an event a crash never sends.
//
// The caller holds lease on a lock; the sweep writes under its fencing
// number, so a sweeper that stalled past its lock's TTL finds its write
// refused (db.ErrStaleFence) instead of racing its successor.
func (s *Service) Sweep(ctx context.Context, actor string, lease lock.Lease) (SweepResult, error) {
	var moved []db.Fulfilment
	err := s.cfg.Store.InTx(ctx, func(tx pgx.Tx) error {
		if err := db.CheckFence(ctx, tx, lease.Name, lease.Fence); err != nil {
			return err
		}
		var err error
		moved, err = db.SweepStale(ctx, tx, s.cfg.DispatchLease, actor, s.dbNow())
		return err
	})
	if err != nil {
		return SweepResult{}, err
	}
	s.cfg.Metrics.Transition(state.Dispatching, state.NeedsReconciliation, len(moved))
	for _, f := range moved {
		s.cfg.Logger.WarnContext(ctx, "sweep: dispatch lease expired; parked for reconciliation",
			"fulfilment_id", f.ID, "payment_id", f.PaymentID, "attempt", f.Attempt)
	}
	return SweepResult{Parked: len(moved)}, nil
}
