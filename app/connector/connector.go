// Package connector performs the external action a payment pays for. A
// connector is a Go interface; a new one is a new file, with no change
// elsewhere.
package connector

import (
	"context"
	"encoding/json"

	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/receiver/contract"
)

// Request is one attempt at one fulfilment's action.
//
// Every attempt under one Key carries the same body: Key, Provider,
// PaymentID, EventID, EventType, Action and Payload. The fulfilment's row id and the
// attempt number are not in the body (a restored database names the same
// key under a new row id; an attempt is a retry of the same request); the
// attempt travels in the Guardian-Attempt header.
type Request struct {
	// Key is the Idempotency-Key, derived from the payment: the same for
	// every attempt at the payment's fulfilment, in any database.
	Key string
	// FulfilmentID names the row in Guardian, for logs and evidence.
	FulfilmentID string
	// Attempt is the fencing number of this attempt; a later attempt always
	// carries a larger one.
	Attempt   int
	Provider  string
	PaymentID string
	EventID   string
	EventType string
	// Action is state.Revoke when the request takes the payment back (a
	// refund or dispute reversed it); state.Fulfil, or "", fulfils.
	Action state.Action
	// ActionName names the action of the purchase the request performs;
	// Purchase is the purchase's recorded shape. Both are left out of the
	// body when empty (a deployment without an actions file).
	ActionName string
	Purchase   json.RawMessage
	Payload    json.RawMessage
}

// Result is what one call established, by fact.
type Result struct {
	Outcome state.Outcome
	// Status is the receiver's HTTP status; 0 when no answer came.
	Status int
	// Error names why the call did not end in an answer, one of
	// ErrorClasses or a short reason ("deadline passed before sending");
	// "" when an answer came.
	Error string
	// Evidence is recorded in the transition log for people: status
	// codes, error classes, a short excerpt of the answer, timings. Never
	// a secret. Nothing decides on it: the typed fields above are the
	// facts.
	Evidence map[string]any
}

// Connector performs fulfilments.
//
// Fulfil is called at most once per attempt, from many goroutines at once.
// It must classify what happened by fact (see state.Outcome): Done only when
// the receiver confirmed; NotSent only when nothing can have left;
// NotDelivered only when the receiver refused the request before its
// business logic (authentication, routing, transport); Declined only on the
// receiver's authenticated word that it declined the key; Refused for any
// other refusal (no proof that nothing was done); and Unknown for
// everything else, including ctx ending mid-call. It never retries on its
// own.
type Connector interface {
	Fulfil(ctx context.Context, req Request) Result
}

// Answer is a lookup's verdict on what was done for an idempotency key.
type Answer int

const (
	// CannotTell means the lookup could not decide; the fulfilment stays
	// parked, and a human or a later lookup settles it.
	CannotTell Answer = iota
	// Performed means the action for the key was done.
	Performed
	// NotPerformed means the receiver has no record of the key and nothing
	// is running for it: nothing was done.
	NotPerformed
	// InProgress means a request with the key is being processed at the
	// receiver right now: ask again later.
	InProgress
	// Declined means the receiver declined the key, for good: nothing was
	// done and nothing will be for that key.
	Declined
)

// String returns the answer as it appears in evidence and in the
// fulfilment_check log.
func (a Answer) String() string {
	switch a {
	case Performed:
		return contract.StatusDone
	case NotPerformed:
		return contract.StatusNotDone
	case InProgress:
		return contract.StatusInProgress
	case Declined:
		return contract.StatusDeclined
	default:
		return "cannot_tell"
	}
}

// Looker is implemented by connectors that can say what was done for an
// idempotency key. It must be safe for concurrent use; an error counts as
// CannotTell.
type Looker interface {
	Lookup(ctx context.Context, idempotencyKey string) (Answer, map[string]any, error)
}
