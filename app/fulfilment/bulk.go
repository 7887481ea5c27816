package fulfilment

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

// MaxBulk caps the fulfilments one bulk action names.
const MaxBulk = 100

// BulkResult is what a bulk action did to one fulfilment it named.
type BulkResult struct {
	ID string
	// Verdict is one of verdict.go's Retry…, Check… or Bulk… verdicts.
	Verdict Verdict
	// FulfilmentID is the fulfilment a retry created.
	FulfilmentID string
	// ActionName is the action of the fulfilment named, where it was
	// found: a bulk move on a page of several actions says which each
	// result is about.
	ActionName string
}

// ErrTooMany means a bulk action named more than MaxBulk fulfilments, or
// none.
var ErrTooMany = fmt.Errorf("%w: name 1 to %d fulfilments", ErrInvalid, MaxBulk)

// ErrNoLookup means a re-check was asked of a service with no connector
// lookup configured.
var ErrNoLookup = errors.New("no connector lookup is configured: parked fulfilments can only be resolved by an operator")

// bulkIDs checks a bulk action's names and returns them with repeats
// dropped, in their first order.
func bulkIDs(ids []string, operator string) ([]string, error) {
	if operator == "" {
		return nil, fmt.Errorf("%w: an operator is required", ErrInvalid)
	}
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	if len(out) == 0 || len(out) > MaxBulk {
		return nil, ErrTooMany
	}
	return out, nil
}

// Retry gives each failed fulfilment among ids a new dispatch: its stored
// event runs through the dedup path again, exactly as a replay does, so a
// new fulfilment is created only if nothing else holds the payment (a failed
// fulfilment is the receiver's word that nothing was done, and frees the
// payment for its next key: invariant 3). Each is its own transaction; the
// new fulfilment's first transition names the operator and the failed one.
//
// Every id gets its own result: one whose transaction failed is BulkFailed
// (nothing changed for it) beside the others' results, so a committed retry
// is never reported as failed. Only when every id failed is the error
// returned.
func (s *Service) Retry(ctx context.Context, ids []string, operator string) ([]BulkResult, error) {
	ids, err := bulkIDs(ids, operator)
	if err != nil {
		return nil, err
	}
	out := make([]BulkResult, len(ids))
	errs := make([]error, len(ids))
	for i, id := range ids {
		out[i], errs[i] = s.retryOne(ctx, id, operator)
	}
	return s.perID(ctx, "retry", out, errs)
}

// perID reports a bulk action's results with each failed id as
// BulkFailed, logging why; when every id failed, the first error is the
// answer instead.
func (s *Service) perID(ctx context.Context, action string, out []BulkResult, errs []error) ([]BulkResult, error) {
	failed := 0
	for i, err := range errs {
		if err == nil {
			continue
		}
		failed++
		out[i].Verdict = BulkFailed
		s.cfg.Logger.WarnContext(ctx, action+": could not be written for one fulfilment; nothing changed for it", "fulfilment_id", out[i].ID, "error", err)
	}
	if failed > 0 && failed == len(out) {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func (s *Service) retryOne(ctx context.Context, id, operator string) (BulkResult, error) {
	r := BulkResult{ID: id}
	if !db.ValidUUID(id) {
		r.Verdict = BulkNotFound
		return r, nil
	}
	born := state.Pending
	var made []db.Born // by a retry of a failed fulfilment
	err := s.cfg.Store.InTx(ctx, func(tx pgx.Tx) error {
		f, err := db.GetFulfilment(ctx, tx, id)
		if err != nil {
			return err
		}
		r.ActionName = f.ActionName
		if f.State != state.Failed {
			r.Verdict = RetryNotFailed
			return nil
		}
		if f.Action == state.Revoke {
			// A revocation the receiver declined: again, under the
			// payment's next revoke key, while the payment stays fulfilled.
			r.FulfilmentID, err = db.RetryRevocation(ctx, tx, f, "operator "+operator, "retry of failed revocation "+id)
			if err == nil && r.FulfilmentID != "" {
				err = s.cfg.Enqueuer.EnqueueDispatchTx(ctx, tx, r.FulfilmentID)
			}
		} else {
			made, err = s.create(ctx, tx, f.EventPK, f.ActionName, "operator "+operator, "retry of failed fulfilment "+id)
			if len(made) > 0 {
				r.FulfilmentID, born = made[0].ID, made[0].State
			}
		}
		r.Verdict = RetryPaymentHeld
		if r.FulfilmentID != "" {
			r.Verdict = RetryCreated
		}
		return err
	})
	if errors.Is(err, db.ErrNotFound) {
		return BulkResult{ID: id, Verdict: BulkNotFound}, nil
	}
	if err != nil {
		return BulkResult{ID: id}, fmt.Errorf("retry %s: %w", id, err)
	}
	s.announce(made)
	if r.Verdict == RetryCreated {
		s.cfg.Metrics.Transition(r.ActionName, "", born, 1)
		s.cfg.Logger.InfoContext(ctx, "failed fulfilment retried by operator", "fulfilment_id", id,
			"new_fulfilment_id", r.FulfilmentID, "operator", operator)
	}
	return r, nil
}

// recheckWorkers bounds the lookups one re-check runs at once.
const recheckWorkers = 8

// Recheck looks up each parked fulfilment among ids now, ignoring its
// backoff, and applies the answer as the reconciler would, with the operator
// as the actor of each check row and transition. The grace still holds: a
// fulfilment parked less than the reconcile grace ago is not looked up (its
// call could still be running). When ctx has a deadline, no lookup starts
// that could not finish; those are reported not reached. Each id gets its
// own result, as for Retry (BulkFailed for one whose answer could not be
// written). A lookup racing
// the reconciler's own is harmless: an answer is recorded and applied only
// while the row is still parked at the attempt it was asked about.
func (s *Service) Recheck(ctx context.Context, ids []string, operator string) ([]BulkResult, error) {
	ids, err := bulkIDs(ids, operator)
	if err != nil {
		return nil, err
	}
	if len(s.asks) == 0 {
		return nil, ErrNoLookup
	}
	found, err := db.FulfilmentsByID(ctx, s.cfg.Store.Pool(), ids, s.cfg.ReconcileGrace)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]db.GraceState, len(found))
	for _, g := range found {
		byID[g.ID] = g
	}
	out := make([]BulkResult, len(ids))
	var due []int
	for i, id := range ids {
		out[i].ID = id
		g, ok := byID[id]
		out[i].ActionName = g.ActionName
		switch {
		case !ok:
			out[i].Verdict = BulkNotFound
		case g.State != state.NeedsReconciliation:
			out[i].Verdict = CheckNotParked
		case !g.PastGrace:
			out[i].Verdict = CheckWithinGrace
		case s.looker(g.ActionName) == nil:
			out[i].Verdict = CheckNoLookup
		default:
			due = append(due, i)
		}
	}
	actor := "operator " + operator
	var wg sync.WaitGroup
	errs := make([]error, len(ids))
	work := make(chan int)
	for range min(recheckWorkers, len(due)) {
		wg.Go(func() {
			for i := range work {
				out[i].Verdict = CheckNotReached
				if ctx.Err() == nil && s.lookupFits(ctx) {
					out[i].Verdict, errs[i] = s.check(ctx, byID[ids[i]].Fulfilment, actor)
				}
			}
		})
	}
	for _, i := range due {
		work <- i
	}
	close(work)
	wg.Wait()
	s.cfg.Logger.InfoContext(ctx, "parked fulfilments re-checked by operator", "operator", operator, "named", len(ids), "looked_up", len(due))
	return s.perID(ctx, "re-check", out, errs)
}
