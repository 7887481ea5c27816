package fulfilment

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

// Resolution is an operator's decision on a parked fulfilment.
type Resolution struct {
	FulfilmentID string
	// To is fulfilled, pending (dispatch again) or cancelled.
	To       state.State
	Operator string
	Reason   string
	// Evidence is the fact behind the decision. Required for fulfilled (what
	// shows it was done) and for pending (what shows nothing was done).
	Evidence string
}

// ErrInvalid wraps a resolution that is refused before touching anything.
var ErrInvalid = errors.New("invalid resolution")

// ErrMoved means the fulfilment was not where the resolution expected it:
// someone or something moved it first.
var ErrMoved = errors.New("fulfilment is not awaiting reconciliation")

const maxText = 2000

// Validate reports why the resolution would be refused, or nil.
func (r Resolution) Validate() error {
	switch {
	case !db.ValidUUID(r.FulfilmentID):
		return fmt.Errorf("%w: fulfilment id is not a UUID", ErrInvalid)
	case r.To != state.Fulfilled && r.To != state.Pending && r.To != state.Cancelled:
		return fmt.Errorf("%w: resolution must be fulfilled, pending or cancelled", ErrInvalid)
	case strings.TrimSpace(r.Operator) == "" || len(r.Operator) > 200:
		return fmt.Errorf("%w: operator name is required (at most 200 characters)", ErrInvalid)
	case strings.TrimSpace(r.Reason) == "" || len(r.Reason) > maxText:
		return fmt.Errorf("%w: reason is required (at most %d characters)", ErrInvalid, maxText)
	case len(r.Evidence) > maxText:
		return fmt.Errorf("%w: evidence is at most %d characters", ErrInvalid, maxText)
	case r.To == state.Fulfilled && strings.TrimSpace(r.Evidence) == "":
		return fmt.Errorf("%w: resolving to fulfilled needs evidence that the action was done", ErrInvalid)
	case r.To == state.Pending && strings.TrimSpace(r.Evidence) == "":
		return fmt.Errorf("%w: dispatching again needs evidence that nothing was done", ErrInvalid)
	}
	return nil
}

// Resolve applies an operator's resolution as one conditional transition,
// logged with the operator, reason and evidence. Resolving to pending also
// enqueues a new dispatch, which sends the same Idempotency-Key. It returns
// ErrInvalid for a refused resolution, db.ErrNotFound for an unknown
// fulfilment and ErrMoved when the row was no longer parked.
func (s *Service) Resolve(ctx context.Context, r Resolution) (db.Fulfilment, error) {
	if err := r.Validate(); err != nil {
		return db.Fulfilment{}, err
	}
	var moved db.Fulfilment
	err := s.cfg.Store.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := db.GetFulfilment(ctx, tx, r.FulfilmentID); err != nil {
			return err
		}
		var err error
		moved, err = db.Transit(ctx, tx, db.TransitionParams{
			ID: r.FulfilmentID, From: state.NeedsReconciliation, To: r.To,
			Actor: "operator " + r.Operator, Reason: r.Reason,
			Evidence: map[string]any{"resolution": string(r.To), "evidence": r.Evidence},
		})
		if errors.Is(err, db.ErrConflict) {
			return ErrMoved
		}
		if err != nil {
			return err
		}
		if r.To == state.Pending {
			return s.cfg.Enqueuer.EnqueueDispatchTx(ctx, tx, r.FulfilmentID)
		}
		return nil
	})
	if err != nil {
		return db.Fulfilment{}, err
	}
	s.cfg.Metrics.Transition(state.NeedsReconciliation, r.To, 1)
	s.cfg.Logger.InfoContext(ctx, "fulfilment resolved by operator", "fulfilment_id", r.FulfilmentID,
		"payment_id", moved.PaymentID, "to", string(r.To), "operator", r.Operator)
	return moved, nil
}
