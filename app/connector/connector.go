// Package connector performs the external action a payment pays for. A
// connector is a Go interface; a new one is a new file, with no change
// elsewhere.
package connector

import (
	"context"
	"encoding/json"

	"github.com/guardian-pay/guardian/app/state"
)

// Request is one attempt at one fulfilment's action.
type Request struct {
	// FulfilmentID is the fulfilment's id and the Idempotency-Key: the same
	// for every attempt at the same fulfilment.
	FulfilmentID string `json:"fulfilment_id"`
	// Attempt is the fencing number of this attempt; a later attempt always
	// carries a larger one.
	Attempt   int             `json:"attempt"`
	PaymentID string          `json:"payment_id"`
	EventID   string          `json:"event_id"`
	EventType string          `json:"event_type"`
	Payload   json.RawMessage `json:"payload"`
}

// Result is what one call established, by fact.
type Result struct {
	Outcome state.Outcome
	// Evidence is recorded in the transition log: status codes, error
	// classes, a short excerpt of the answer, timings. Never a secret.
	Evidence map[string]any
}

// Connector performs fulfilments.
//
// Fulfil is called at most once per attempt, from many goroutines at once.
// It must classify what happened by fact (see state.Outcome): Done only when
// the receiver confirmed, NotSent only when nothing can have left, Rejected
// only when the receiver definitively refused, and Unknown for everything
// else, including ctx ending mid-call. It never retries on its own.
type Connector interface {
	Fulfil(ctx context.Context, req Request) Result
}

// Answer is a lookup's verdict on whether an idempotency key's action was done.
type Answer int

const (
	// CannotTell means the lookup could not decide; the fulfilment stays for
	// a human.
	CannotTell Answer = iota
	// Performed means the action for the key was done.
	Performed
	// NotPerformed means the receiver has no record of the key: nothing was done.
	NotPerformed
)

// String returns the answer as it appears in evidence.
func (a Answer) String() string {
	switch a {
	case Performed:
		return "done"
	case NotPerformed:
		return "not_done"
	default:
		return "cannot_tell"
	}
}

// Looker is implemented by connectors that can say whether the action for an
// idempotency key was done. It must be safe for concurrent use; an error
// counts as CannotTell.
type Looker interface {
	Lookup(ctx context.Context, idempotencyKey string) (Answer, map[string]any, error)
}
