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
	// Attempt is the attempt the operator decided about, as they saw it: a
	// resolution lands only if the row is still parked at that attempt.
	Attempt int
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

// ErrMoved means the fulfilment was not where the resolution expected it
// (parked, at the attempt named): someone or something moved it first.
var ErrMoved = errors.New("fulfilment moved: it is not parked at the attempt the resolution names")

// ErrInFlight means a resolution to pending came while the parked call
// could still be running at the receiver (within the connector timeout and
// RecordMargin of its dispatch): "nothing was done" cannot be known yet.
var ErrInFlight = errors.New("the parked call could still be in flight: wait until its timeout has passed")

const maxText = 2000

// Validate reports why the resolution would be refused, or nil.
func (r Resolution) Validate() error {
	if r.To != state.Fulfilled && r.To != state.Pending && r.To != state.Cancelled {
		return fmt.Errorf("%w: resolution must be fulfilled, pending or cancelled", ErrInvalid)
	}
	var needs string
	switch r.To {
	case state.Fulfilled:
		needs = "resolving to fulfilled needs evidence that the action was done"
	case state.Pending:
		needs = "dispatching again needs evidence that nothing was done"
	}
	return validateDecision(r.FulfilmentID, r.Attempt, r.Operator, r.Reason, r.Evidence, needs)
}

// validateDecision checks what every operator decision carries; needs,
// when set, says why evidence is required.
func validateDecision(id string, attempt int, operator, reason, evidence, needs string) error {
	switch {
	case !db.ValidUUID(id):
		return fmt.Errorf("%w: fulfilment id is not a UUID", ErrInvalid)
	case attempt < 1:
		return fmt.Errorf("%w: attempt is required: the attempt the decision is about, as shown with the fulfilment", ErrInvalid)
	case strings.TrimSpace(operator) == "" || len(operator) > 200:
		return fmt.Errorf("%w: operator name is required (at most 200 characters)", ErrInvalid)
	case strings.TrimSpace(reason) == "" || len(reason) > maxText:
		return fmt.Errorf("%w: reason is required (at most %d characters)", ErrInvalid, maxText)
	case len(evidence) > maxText:
		return fmt.Errorf("%w: evidence is at most %d characters", ErrInvalid, maxText)
	case needs != "" && strings.TrimSpace(evidence) == "":
		return fmt.Errorf("%w: %s", ErrInvalid, needs)
	}
	return nil
}

// Resolve applies an operator's resolution as one conditional transition,
// fenced on the attempt the operator named and logged with the operator,
// reason and evidence. Resolving to pending also enqueues a new dispatch,
// which sends the same Idempotency-Key; it is refused with ErrInFlight
// while the parked call could still be running. It returns ErrInvalid for a
// refused resolution, db.ErrNotFound for an unknown fulfilment and ErrMoved
// when the row was no longer parked at that attempt.
func (s *Service) Resolve(ctx context.Context, r Resolution) (db.Fulfilment, error) {
	if err := r.Validate(); err != nil {
		return db.Fulfilment{}, err
	}
	// Dispatching again waits until the parked call cannot be in flight,
	// and enqueues the new dispatch in the same transaction.
	var before, after func(pgx.Tx) error
	if r.To == state.Pending {
		before = func(tx pgx.Tx) error {
			claim, err := db.Claim(ctx, tx, r.FulfilmentID, RecordMargin, s.cfg.ConnectorTimeout+RecordMargin)
			if err == nil && claim.Live {
				err = ErrInFlight
			}
			return err
		}
		after = func(tx pgx.Tx) error { return s.cfg.Enqueuer.EnqueueDispatchTx(ctx, tx, r.FulfilmentID) }
	}
	moved, err := s.decide(ctx, db.TransitionParams{
		ID: r.FulfilmentID, From: state.NeedsReconciliation, To: r.To, Attempt: r.Attempt,
		Actor: "operator " + r.Operator, Reason: r.Reason,
		Evidence: map[string]any{"resolution": string(r.To), "evidence": r.Evidence},
	}, before, after)
	if err != nil {
		return db.Fulfilment{}, err
	}
	s.cfg.Metrics.Transition(moved.ActionName, state.NeedsReconciliation, r.To, 1)
	s.cfg.Logger.InfoContext(ctx, "fulfilment resolved by operator", "fulfilment_id", r.FulfilmentID,
		"payment_id", moved.PaymentID, "to", string(r.To), "operator", r.Operator)
	return moved, nil
}

// Reopening is an operator's decision to take a cancelled fulfilment back
// to needs_reconciliation, on the same row and Idempotency-Key, because new
// evidence says the cancel was wrong.
type Reopening struct {
	FulfilmentID string
	// Attempt is the cancelled row's attempt, as the operator saw it.
	Attempt  int
	Operator string
	Reason   string
	// Evidence is what shows the cancel was wrong. Required.
	Evidence string
}

// Validate reports why the reopening would be refused, or nil.
func (r Reopening) Validate() error {
	return validateDecision(r.FulfilmentID, r.Attempt, r.Operator, r.Reason, r.Evidence, "reopening needs evidence that the cancel was wrong")
}

// Reopen moves a cancelled fulfilment back to needs_reconciliation, where
// only facts (a lookup, a late answer, an operator with evidence) move it
// on: a cancelled payment is never sent again under a new key. The move is
// fenced on the attempt and logged with the operator, reason and evidence.
// It returns ErrInvalid, db.ErrNotFound, or ErrMoved when the row is not
// cancelled at that attempt.
func (s *Service) Reopen(ctx context.Context, r Reopening) (db.Fulfilment, error) {
	if err := r.Validate(); err != nil {
		return db.Fulfilment{}, err
	}
	moved, err := s.decide(ctx, db.TransitionParams{
		ID: r.FulfilmentID, From: state.Cancelled, To: state.NeedsReconciliation, Attempt: r.Attempt,
		Actor: "operator " + r.Operator, Reason: r.Reason,
		Evidence: map[string]any{"reopened": true, "evidence": r.Evidence},
	}, nil, nil)
	if err != nil {
		return db.Fulfilment{}, err
	}
	s.cfg.Metrics.Transition(moved.ActionName, state.Cancelled, state.NeedsReconciliation, 1)
	s.cfg.Logger.InfoContext(ctx, "fulfilment reopened by operator", "fulfilment_id", r.FulfilmentID,
		"payment_id", moved.PaymentID, "operator", r.Operator)
	return moved, nil
}

// decide applies one operator decision as one transaction: the fulfilment
// must exist (db.ErrNotFound), and a row no longer where p expects it is
// ErrMoved. before and after, when not nil, run ahead of the move and behind
// it, in the same transaction.
func (s *Service) decide(ctx context.Context, p db.TransitionParams, before, after func(pgx.Tx) error) (db.Fulfilment, error) {
	var moved db.Fulfilment
	err := s.cfg.Store.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := db.GetFulfilment(ctx, tx, p.ID); err != nil {
			return err
		}
		if before != nil {
			if err := before(tx); err != nil {
				return err
			}
		}
		var err error
		moved, err = db.Transit(ctx, tx, p)
		if errors.Is(err, db.ErrConflict) {
			return ErrMoved
		}
		if err != nil || after == nil {
			return err
		}
		return after(tx)
	})
	return moved, err
}
