// Package reconcile settles fulfilments parked as needs_reconciliation, by
// facts only: an operator's resolution with a reason, or a connector's
// lookup by idempotency key. A lookup that cannot tell leaves the row for a
// human; nothing here ever retries on a guess.
package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/intake"
	"github.com/guardian-pay/guardian/app/metrics"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

// Config configures a Service.
type Config struct {
	Store    *db.Store
	Enqueuer intake.Enqueuer
	Logger   *slog.Logger
	// Looker answers lookups by idempotency key. Nil disables automatic
	// resolution; operators still resolve by hand.
	Looker connector.Looker
	// Grace is how long a row stays parked before its first lookup, so a
	// call still running at the receiver can finish. Defaults to 1 minute.
	Grace time.Duration
	// Backoff is the wait after the first lookup; it doubles with each
	// further one, up to MaxBackoff. Defaults to 1 minute.
	Backoff time.Duration
	// MaxBackoff caps the wait between lookups. Defaults to 1 hour.
	MaxBackoff time.Duration
	// LookupTimeout bounds one lookup. Defaults to 10 seconds.
	LookupTimeout time.Duration
	// Metrics counts transitions; nil counts nothing.
	Metrics *metrics.Metrics
}

// Service resolves parked fulfilments.
type Service struct {
	cfg Config
}

// New returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Enqueuer == nil || cfg.Logger == nil {
		return nil, errors.New("reconcile: store, enqueuer and logger are required")
	}
	cfg.Grace = cmp.Or(cfg.Grace, time.Minute)
	cfg.Backoff = cmp.Or(cfg.Backoff, time.Minute)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, time.Hour)
	cfg.LookupTimeout = cmp.Or(cfg.LookupTimeout, 10*time.Second)
	return &Service{cfg: cfg}, nil
}

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

// ErrMoved means the fulfilment was not parked when the resolution arrived:
// someone or something resolved it first.
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
			ID: r.FulfilmentID, From: string(state.NeedsReconciliation), To: string(r.To),
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
	s.cfg.Metrics.Transition(string(state.NeedsReconciliation), string(r.To), 1)
	s.cfg.Logger.InfoContext(ctx, "fulfilment resolved by operator", "fulfilment_id", r.FulfilmentID,
		"payment_id", moved.PaymentID, "to", string(r.To), "operator", r.Operator)
	return moved, nil
}

// Summary counts what one RunChecks did.
type Summary struct {
	Checked, Fulfilled, Redispatched, Undecided int
}

// RunChecks asks the connector about every parked fulfilment whose lookup
// is due: done resolves it to fulfilled, not done sends it back to pending
// with a new dispatch (same Idempotency-Key), and cannot tell (or an error,
// or a timeout) leaves it parked with the answer recorded and the next
// lookup backed off. Without a Looker it does nothing.
func (s *Service) RunChecks(ctx context.Context, actor string) (Summary, error) {
	var sum Summary
	if s.cfg.Looker == nil {
		return sum, nil
	}
	due, err := db.DueForCheck(ctx, s.cfg.Store.Pool(), s.cfg.Grace, 100)
	if err != nil {
		return sum, err
	}
	for _, f := range due {
		if ctx.Err() != nil {
			return sum, ctx.Err()
		}
		sum.Checked++
		answer, evidence := s.lookup(ctx, f.ID)
		log := s.cfg.Logger.With("fulfilment_id", f.ID, "payment_id", f.PaymentID, "answer", answer.String())
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
					ID: f.ID, From: string(state.NeedsReconciliation), To: string(state.Fulfilled), Attempt: f.Attempt,
					Actor: actor, Reason: "connector lookup: done", Evidence: evidence,
				})
				return err
			})
			if err = s.settled(ctx, log, err, state.Fulfilled); err != nil {
				return sum, err
			}
			sum.Fulfilled++
		case connector.NotPerformed:
			err := s.cfg.Store.InTx(ctx, func(tx pgx.Tx) error {
				if err := record(tx); err != nil {
					return err
				}
				if _, err := db.Transit(ctx, tx, db.TransitionParams{
					ID: f.ID, From: string(state.NeedsReconciliation), To: string(state.Pending), Attempt: f.Attempt,
					Actor: actor, Reason: "connector lookup: not done; dispatching again", Evidence: evidence,
				}); err != nil {
					return err
				}
				return s.cfg.Enqueuer.EnqueueDispatchTx(ctx, tx, f.ID)
			})
			if err = s.settled(ctx, log, err, state.Pending); err != nil {
				return sum, err
			}
			sum.Redispatched++
		default:
			if err := s.cfg.Store.InTx(ctx, record); err != nil {
				return sum, err
			}
			log.InfoContext(ctx, "reconcile: lookup could not tell; left for an operator", "evidence", evidence)
			sum.Undecided++
		}
	}
	return sum, nil
}

// settled logs a resolution's result; a conflict (someone resolved it
// first) is not an error.
func (s *Service) settled(ctx context.Context, log *slog.Logger, err error, to state.State) error {
	if errors.Is(err, db.ErrConflict) {
		log.InfoContext(ctx, "reconcile: fulfilment moved before the lookup's answer was applied")
		return nil
	}
	if err != nil {
		return err
	}
	s.cfg.Metrics.Transition(string(state.NeedsReconciliation), string(to), 1)
	log.InfoContext(ctx, "reconcile: resolved by connector lookup")
	return nil
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
	d := s.cfg.Backoff
	for range min(checks, 30) {
		d *= 2
		if d >= s.cfg.MaxBackoff {
			return s.cfg.MaxBackoff
		}
	}
	return d
}
