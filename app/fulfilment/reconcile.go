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
	Checked, Fulfilled, Redispatched, Undecided int
}

// reconcileBatch caps the rows one round looks up.
const reconcileBatch = 100

// Reconcile asks the connector about every parked fulfilment whose lookup
// is due: done resolves it to fulfilled, not done sends it back to pending
// with a new dispatch (same Idempotency-Key), and cannot tell (or an error,
// or a timeout) leaves it parked with the answer recorded and the next
// lookup backed off. An answer about a row that moved meanwhile is neither
// applied nor recorded. Without a Looker it does nothing.
//
// Each lookup takes at most LookupTimeout; when ctx has a deadline, the
// round starts no lookup it could not finish, and the rest wait for the
// next round.
func (s *Service) Reconcile(ctx context.Context, actor string) (ReconcileResult, error) {
	var sum ReconcileResult
	if s.cfg.Looker == nil {
		return sum, nil
	}
	due, err := db.DueForCheck(ctx, s.cfg.Store.Pool(), s.cfg.ReconcileGrace, reconcileBatch)
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
		case CheckUndecided:
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

// Result is what an operator's bulk action, or one lookup of a parked
// fulfilment, did to one fulfilment.
type Result string

// What a lookup led to.
const (
	// CheckFulfilled: the connector said done; the fulfilment is fulfilled.
	CheckFulfilled Result = "fulfilled"
	// CheckRedispatched: the connector said not done; the fulfilment is pending
	// with a new dispatch under the same Idempotency-Key.
	CheckRedispatched Result = "redispatched"
	// CheckUndecided: the connector could not tell; the answer is recorded and
	// the fulfilment stays parked.
	CheckUndecided Result = "cannot_tell"
	// CheckMoved: the fulfilment moved while the lookup ran; its answer was
	// neither applied nor recorded.
	CheckMoved Result = "moved"
)

// check looks up one parked fulfilment and applies the answer, with actor
// in its check row and in any transition it makes.
func (s *Service) check(ctx context.Context, f db.Fulfilment, actor string) (Result, error) {
	answer, evidence := s.lookup(ctx, f.ID)
	log := s.cfg.Logger.With("fulfilment_id", f.ID, "payment_id", f.PaymentID, "answer", answer.String(), "actor", actor)
	record := func(tx pgx.Tx) error {
		return db.RecordCheck(ctx, tx, f.ID, f.Attempt, actor, answer.String(), evidence, s.backoff(f.Checks))
	}
	// A decisive answer is recorded and applied in one transaction: if
	// applying fails, nothing is recorded and the row stays due for the
	// next round, instead of waiting out a backoff it never earned.
	switch answer {
	case connector.Performed:
		err := s.cfg.Store.InTx(ctx, func(tx pgx.Tx) error {
			if err := record(tx); err != nil {
				return err
			}
			_, err := db.Transit(ctx, tx, db.TransitionParams{
				ID: f.ID, From: state.NeedsReconciliation, To: state.Fulfilled, Attempt: f.Attempt,
				Actor: actor, Reason: "connector lookup: done", Evidence: evidence,
			})
			return err
		})
		return s.settled(ctx, log, err, state.Fulfilled, CheckFulfilled)
	case connector.NotPerformed:
		err := s.cfg.Store.InTx(ctx, func(tx pgx.Tx) error {
			if err := record(tx); err != nil {
				return err
			}
			if _, err := db.Transit(ctx, tx, db.TransitionParams{
				ID: f.ID, From: state.NeedsReconciliation, To: state.Pending, Attempt: f.Attempt,
				Actor: actor, Reason: "connector lookup: not done; dispatching again", Evidence: evidence,
			}); err != nil {
				return err
			}
			return s.cfg.Enqueuer.EnqueueDispatchTx(ctx, tx, f.ID)
		})
		return s.settled(ctx, log, err, state.Pending, CheckRedispatched)
	default:
		err := s.cfg.Store.InTx(ctx, record)
		if errors.Is(err, db.ErrConflict) {
			log.InfoContext(ctx, "reconcile: fulfilment moved before the lookup's answer was recorded")
			return CheckMoved, nil
		}
		if err != nil {
			return "", err
		}
		log.InfoContext(ctx, "reconcile: lookup could not tell; left for an operator", "evidence", evidence)
		return CheckUndecided, nil
	}
}

// settled logs a resolution's result; a conflict (someone resolved it
// first) is not an error.
func (s *Service) settled(ctx context.Context, log *slog.Logger, err error, to state.State, result Result) (Result, error) {
	if errors.Is(err, db.ErrConflict) {
		log.InfoContext(ctx, "reconcile: fulfilment moved before the lookup's answer was applied")
		return CheckMoved, nil
	}
	if err != nil {
		return "", err
	}
	s.cfg.Metrics.Transition(state.NeedsReconciliation, to, 1)
	log.InfoContext(ctx, "reconcile: resolved by connector lookup")
	return result, nil
}

func (s *Service) lookup(ctx context.Context, id string) (connector.Answer, map[string]any) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.LookupTimeout)
	defer cancel()
	start := time.Now()
	answer, evidence, err := s.cfg.Looker.Lookup(ctx, id)
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
