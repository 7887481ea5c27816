package fulfilment

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

// ReconcileResult counts what one Reconcile round did.
type ReconcileResult struct {
	Checked, Fulfilled, Redispatched, Failed, Cancelled, Undecided int
}

// reconcileBatch caps the rows one round looks up.
const reconcileBatch = 100

// Reconcile asks the connector about every parked fulfilment whose lookup
// is due (see check for what each answer does); cannot tell, in progress,
// an error or a timeout leave it parked with the answer recorded and the
// next lookup backed off. An answer about a row that moved meanwhile is neither
// applied nor recorded. Without a Looker it does nothing.
//
// Each lookup takes at most LookupTimeout; when ctx has a deadline, the
// round starts no lookup it could not finish, and the rest wait for the
// next round.
func (s *Service) Reconcile(ctx context.Context, actor string) (ReconcileResult, error) {
	var sum ReconcileResult
	if len(s.asks) == 0 {
		return sum, nil
	}
	due, err := db.DueForCheck(ctx, s.cfg.Store.Pool(), s.cfg.ReconcileGrace, reconcileBatch, s.asks)
	if err != nil {
		return sum, err
	}
	for _, f := range due {
		if ctx.Err() != nil {
			return sum, ctx.Err()
		}
		if !s.lookupFits(ctx) {
			break
		}
		sum.Checked++
		c, err := s.check(ctx, f, actor)
		if err != nil {
			return sum, err
		}
		switch c {
		case CheckFulfilled:
			sum.Fulfilled++
		case CheckRedispatched:
			sum.Redispatched++
		case CheckFailed:
			sum.Failed++
		case CheckCancelled:
			sum.Cancelled++
		case CheckUndecided, CheckInProgress:
			sum.Undecided++
		}
	}
	return sum, nil
}

// lookupFits reports whether a lookup started now ends before ctx's
// deadline, if it has one.
func (s *Service) lookupFits(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return !ok || time.Until(d) >= s.cfg.LookupTimeout+RecordMargin/5
}

// check looks up one parked fulfilment and applies the answer, with actor
// in its check row and in any transition it makes:
//
//   - done: fulfilled; a fulfilment of a payment taken back meanwhile gets
//     its revocation in the same transaction.
//   - not done: pending again with a new dispatch, under the same key and
//     body; but failed when the parked attempt was refused (a 4xx without
//     the receiver's signed word): the receiver refused the request and
//     says nothing was done, and the same bytes would be refused again;
//     and cancelled when the payment was taken back: nothing went out,
//     which the receiver now says and not only Guardian's rows.
//   - declined: failed; the payment is free for its next key.
//   - in progress: recorded; the row stays parked and is asked again after
//     the grace.
//   - cannot tell: recorded; the row stays parked, asked again after a
//     growing backoff.
func (s *Service) check(ctx context.Context, f db.Fulfilment, actor string) (Verdict, error) {
	answer, evidence := s.lookup(ctx, f.ActionName, f.Key)
	log := s.cfg.Logger.With("fulfilment_id", f.ID, "payment_id", f.PaymentID, "answer", answer.String(), "actor", actor)
	// "In progress" means the receiver is working on the key now: ask again
	// after the grace (the time a running call is given to finish), not
	// after a backoff that grows as if the receiver could not tell.
	next := s.backoff(f.Checks)
	if answer == connector.InProgress {
		next = s.cfg.ReconcileGrace
	}
	record := func(tx pgx.Tx) error {
		return db.RecordCheck(ctx, tx, f.ID, f.Attempt, actor, answer.String(), evidence, next)
	}
	// A decisive answer is recorded and applied in one transaction: if
	// applying fails, nothing is recorded and the row stays due for the
	// next round, instead of waiting out a backoff it never earned.
	move := func(to state.State, reason string, after func(pgx.Tx) error) error {
		return s.cfg.Store.InTx(ctx, func(tx pgx.Tx) error {
			if err := record(tx); err != nil {
				return err
			}
			if _, err := db.Transit(ctx, tx, db.TransitionParams{
				ID: f.ID, From: state.NeedsReconciliation, To: to, Attempt: f.Attempt,
				Actor: actor, Reason: reason, Evidence: evidence,
			}); err != nil {
				return err
			}
			if after != nil {
				return after(tx)
			}
			return nil
		})
	}
	switch answer {
	case connector.Performed:
		var revoking []string
		err := move(state.Fulfilled, "connector lookup: done", func(tx pgx.Tx) error {
			if f.Action != state.Fulfil {
				return nil
			}
			var err error
			_, revoking, err = s.takeBack(ctx, tx, actor, []db.Payment{{Provider: f.Provider, PaymentID: f.PaymentID}}, time.Time{})
			return err
		})
		v, err := s.settled(ctx, log, f.ActionName, err, state.Fulfilled, CheckFulfilled)
		if v == CheckFulfilled && len(revoking) > 0 {
			s.countMoved(ctx, "", state.Pending, revoking)
			log.InfoContext(ctx, "reconcile: the payment was taken back meanwhile; revocation created", "revocation_id", revoking[0])
		}
		return v, err
	case connector.Declined:
		err := move(state.Failed, "connector lookup: the receiver declined the key", nil)
		return s.settled(ctx, log, f.ActionName, err, state.Failed, CheckFailed)
	case connector.NotPerformed:
		if f.CallOutcome != nil && *f.CallOutcome == state.Refused {
			err := move(state.Failed, "connector lookup: not done, after the receiver refused the request", nil)
			return s.settled(ctx, log, f.ActionName, err, state.Failed, CheckFailed)
		}
		if f.Action == state.Fulfil {
			reversed, err := db.Reversed(ctx, s.cfg.Store.Pool(), db.Payment{Provider: f.Provider, PaymentID: f.PaymentID})
			if err != nil {
				return "", err
			}
			if reversed {
				err := move(state.Cancelled, notDoneReversed, nil)
				return s.settled(ctx, log, f.ActionName, err, state.Cancelled, CheckCancelled)
			}
		}
		err := move(state.Pending, "connector lookup: not done; dispatching again under the same key", func(tx pgx.Tx) error {
			return s.cfg.Enqueuer.EnqueueDispatchTx(ctx, tx, f.ID)
		})
		return s.settled(ctx, log, f.ActionName, err, state.Pending, CheckRedispatched)
	default:
		err := s.cfg.Store.InTx(ctx, record)
		if errors.Is(err, db.ErrConflict) {
			log.InfoContext(ctx, "reconcile: fulfilment moved before the lookup's answer was recorded")
			return CheckMoved, nil
		}
		if err != nil {
			return "", err
		}
		if answer == connector.InProgress {
			log.InfoContext(ctx, "reconcile: the receiver is still processing the key; asking again later", "evidence", evidence)
			return CheckInProgress, nil
		}
		log.InfoContext(ctx, "reconcile: lookup could not tell; left for an operator", "evidence", evidence)
		return CheckUndecided, nil
	}
}

// notDoneReversed is the reason a parked fulfilment of a payment taken back
// is cancelled when its receiver says its key was not done.
const notDoneReversed = "connector lookup: not done, and the payment was taken back: never sent, and never will be"

// settled logs a resolution's result; a conflict (someone resolved it
// first) is not an error.
func (s *Service) settled(ctx context.Context, log *slog.Logger, action string, err error, to state.State, result Verdict) (Verdict, error) {
	if errors.Is(err, db.ErrConflict) {
		log.InfoContext(ctx, "reconcile: fulfilment moved before the lookup's answer was applied")
		return CheckMoved, nil
	}
	if err != nil {
		return "", err
	}
	s.cfg.Metrics.Transition(action, state.NeedsReconciliation, to, 1)
	log.InfoContext(ctx, "reconcile: resolved by connector lookup")
	return result, nil
}

// lookup asks the receiver of the action about key, within LookupTimeout.
func (s *Service) lookup(ctx context.Context, action, key string) (connector.Answer, map[string]any) {
	looker := s.looker(action)
	if looker == nil {
		return connector.CannotTell, map[string]any{"error": "action " + action + " has no lookup here"}
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.LookupTimeout)
	defer cancel()
	start := time.Now()
	answer, evidence, err := looker.Lookup(ctx, key)
	if evidence == nil {
		evidence = map[string]any{}
	}
	evidence["duration_ms"] = time.Since(start).Milliseconds()
	if err != nil {
		evidence["error"] = err.Error()
		return connector.CannotTell, evidence
	}
	return answer, evidence
}

// backoff is the wait after the checks-th lookup (0-based).
func (s *Service) backoff(checks int) time.Duration {
	d := s.cfg.ReconcileBackoff
	for range min(checks, 30) {
		d *= 2
		if d >= s.cfg.ReconcileMaxBackoff {
			return s.cfg.ReconcileMaxBackoff
		}
	}
	return d
}
