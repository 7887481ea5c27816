// Package intake decides what a verified delivery means and records it: the
// one Postgres transaction that stores the event, creates the payment's
// fulfilment and enqueues its dispatch, with the optional filter in front.
package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/filter"
	"github.com/guardian-pay/guardian/app/metrics"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/db"
)

// Enqueuer inserts the dispatch job for a fulfilment inside the caller's
// transaction, so the job exists if and only if the fulfilment does.
type Enqueuer interface {
	EnqueueDispatchTx(ctx context.Context, tx pgx.Tx, fulfilmentID string) error
}

// Outcome says what a delivery turned out to be.
type Outcome int

const (
	// NewEvent means the event was stored by this delivery.
	NewEvent Outcome = iota
	// DuplicateFiltered means the filter knew the event was committed;
	// Postgres was not touched.
	DuplicateFiltered
	// DuplicatePostgres means Postgres already held the event; the delivery
	// was counted.
	DuplicatePostgres
)

// String names the outcome for logs and metrics.
func (o Outcome) String() string {
	switch o {
	case DuplicateFiltered:
		return "duplicate_filter"
	case DuplicatePostgres:
		return "duplicate_postgres"
	default:
		return "new"
	}
}

// Result reports what Accept did.
type Result struct {
	Outcome Outcome
	// FulfilmentID is set when this delivery created a fulfilment.
	FulfilmentID string
}

// Config configures a Service.
type Config struct {
	Store    *db.Store
	Enqueuer Enqueuer
	// Filter is optional; nil means every delivery goes to Postgres.
	Filter filter.Filter
	Logger *slog.Logger
	// Metrics counts filter fallbacks and new fulfilments; nil counts nothing.
	Metrics *metrics.Metrics
}

// Service accepts verified events.
type Service struct {
	store    *db.Store
	enqueuer Enqueuer
	filter   filter.Filter
	logger   *slog.Logger
	metrics  *metrics.Metrics
}

// New returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Enqueuer == nil || cfg.Logger == nil {
		return nil, errors.New("intake: store, enqueuer and logger are required")
	}
	return &Service{store: cfg.Store, enqueuer: cfg.Enqueuer, filter: cfg.Filter, logger: cfg.Logger, metrics: cfg.Metrics}, nil
}

// Accept records ev exactly once. It returns only after the event is
// committed to Postgres (or was already), so an acknowledgement sent after
// Accept returns nil is never lost. An error means nothing is known to be
// committed and the provider must retry.
func (s *Service) Accept(ctx context.Context, ev provider.Event) (Result, error) {
	// Attributes inline rather than a derived logger: this is the hottest
	// path, and a duplicate answered by the filter logs nothing.
	if s.filter != nil {
		seen, err := s.filter.Committed(ctx, ev.Provider, ev.ID)
		if err != nil {
			s.metrics.FilterError("check", err)
			s.logger.DebugContext(ctx, "duplicate filter unavailable, asking Postgres", "provider", ev.Provider, "event_id", ev.ID, "error", err)
		} else if seen {
			return Result{Outcome: DuplicateFiltered}, nil
		}
	}

	var res Result
	err := s.store.InTx(ctx, func(tx pgx.Tx) error {
		eventPK, inserted, err := db.InsertEvent(ctx, tx, db.EventParams{
			Provider: ev.Provider, EventID: ev.ID, Type: ev.Type, PaymentID: ev.PaymentID, Payload: ev.Payload,
		})
		if err != nil {
			return err
		}
		if !inserted {
			res = Result{Outcome: DuplicatePostgres}
			return nil
		}
		res = Result{Outcome: NewEvent}
		if !ev.Fulfils() {
			return nil
		}
		res.FulfilmentID, err = s.fulfil(ctx, tx, eventPK, ev.Provider, ev.PaymentID, "intake", "payment event received")
		return err
	})
	if err != nil {
		return Result{}, fmt.Errorf("record event: %w", err)
	}

	switch {
	case res.FulfilmentID != "":
		s.metrics.Transition("none", "pending", 1)
		s.logger.InfoContext(ctx, "event stored, fulfilment created", "provider", ev.Provider, "event_id", ev.ID, "payment_id", ev.PaymentID, "fulfilment_id", res.FulfilmentID, "event_type", ev.Type)
	case res.Outcome == NewEvent && ev.Fulfils():
		s.logger.InfoContext(ctx, "event stored; payment already has a fulfilment", "provider", ev.Provider, "event_id", ev.ID, "payment_id", ev.PaymentID, "event_type", ev.Type)
	case res.Outcome == NewEvent:
		s.logger.DebugContext(ctx, "event stored; type does not fulfil", "provider", ev.Provider, "event_id", ev.ID, "event_type", ev.Type)
	}

	// Only now, after the commit, may the filter learn the event.
	if s.filter != nil {
		if err := s.filter.MarkCommitted(ctx, ev.Provider, ev.ID); err != nil {
			s.metrics.FilterError("mark", err)
			s.logger.DebugContext(ctx, "duplicate filter mark failed; later duplicates go to Postgres", "provider", ev.Provider, "event_id", ev.ID, "error", err)
		}
	}
	return res, nil
}

// fulfil creates the payment's fulfilment and its dispatch job in tx, unless
// the payment (or the event) already has a live fulfilment: then it returns
// "" and writes nothing. This is the one place a fulfilment is born.
func (s *Service) fulfil(ctx context.Context, tx pgx.Tx, eventPK int64, providerName, paymentID, actor, reason string) (string, error) {
	id, created, err := db.InsertFulfilment(ctx, tx, eventPK, providerName, paymentID, actor, reason)
	if err != nil || !created {
		return "", err
	}
	if err := s.enqueuer.EnqueueDispatchTx(ctx, tx, id); err != nil {
		return "", fmt.Errorf("enqueue dispatch: %w", err)
	}
	return id, nil
}

// ReplayResult says what a replay did.
type ReplayResult struct {
	// Event is the stored event replayed.
	Event db.Event
	// FulfilmentID is set when the replay created a fulfilment: the payment
	// had no live one (none yet, or only failed or cancelled ones).
	FulfilmentID string
	// Fulfils is false when the event's type does not fulfil a payment.
	Fulfils bool
}

// Replay runs a stored event through the fulfilment dedup path again, for
// an operator: it creates a fulfilment only if the payment has no live one,
// so replaying an event that is fulfilled, in flight or parked changes
// nothing. It returns db.ErrNotFound for an unknown event.
func (s *Service) Replay(ctx context.Context, providerName, eventID, operator string) (ReplayResult, error) {
	var res ReplayResult
	err := s.store.InTx(ctx, func(tx pgx.Tx) error {
		ev, err := db.GetEvent(ctx, tx, providerName, eventID)
		if err != nil {
			return err
		}
		res = ReplayResult{Event: ev, Fulfils: ev.PaymentID != ""}
		if !res.Fulfils {
			return nil
		}
		res.FulfilmentID, err = s.fulfil(ctx, tx, ev.ID, ev.Provider, ev.PaymentID, "operator "+operator, "replay of stored event")
		return err
	})
	if err != nil {
		return ReplayResult{}, fmt.Errorf("replay event: %w", err)
	}
	if res.FulfilmentID != "" {
		s.metrics.Transition("none", "pending", 1)
	}
	s.logger.InfoContext(ctx, "event replayed", "provider", providerName, "event_id", eventID, "operator", operator, "fulfilment_id", res.FulfilmentID)
	return res, nil
}
