package connector

import (
	"context"
	"log/slog"

	"github.com/guardian-pay/guardian/app/state"
)

// Log is the development connector: it logs each fulfilment and reports it
// done. It performs no external action, so `just run` shows deliveries
// becoming fulfilments without a receiver. Never use it with real money.
type Log struct {
	Logger *slog.Logger
}

// Fulfil logs the request and answers Done.
func (l Log) Fulfil(ctx context.Context, r Request) Result {
	l.Logger.InfoContext(ctx, "fulfilled by the development log connector",
		"fulfilment_id", r.FulfilmentID, "attempt", r.Attempt, "payment_id", r.PaymentID,
		"event_id", r.EventID, "event_type", r.EventType)
	return Result{Outcome: state.Done, Evidence: map[string]any{"connector": "log"}}
}
