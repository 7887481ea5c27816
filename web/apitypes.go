package web

import (
	"encoding/json"
	"time"

	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

// The operator API's wire format. These types are the API's own, converted
// from the database's structs in one place each, so a column rename cannot
// change an answer silently.

// Fulfilment is one payment's external action and where it stands.
type Fulfilment struct {
	ID        string      `json:"id"`
	Provider  string      `json:"provider"`
	PaymentID string      `json:"payment_id"`
	State     state.State `json:"state"`
	Attempt   int         `json:"attempt"`
	// Action is what the row does at the receiver: "fulfil", or "revoke"
	// (taking the payment back after a refund or dispute).
	Action state.Action `json:"action"`
	// ActionName is the action of the purchase the row performs or takes
	// back, as the actions file names it ("fulfil" without one).
	ActionName string `json:"action_name"`
	// IdempotencyKey is the key every attempt is sent under (derived from
	// the payment; the fulfilment id for fulfilments made before keys were
	// derived): what to ask the receiver about.
	IdempotencyKey string `json:"idempotency_key"`
	// Deadline is when the current attempt's call can no longer be in
	// flight, by its claimant's connector timeout.
	Deadline     *time.Time `json:"deadline,omitempty"`
	CreatedAt    time.Time  `json:"created_at"`
	UpdatedAt    time.Time  `json:"updated_at"`
	DispatchedAt *time.Time `json:"dispatched_at,omitempty"`
	// Checks counts the reconciler's lookups since the row was last parked;
	// NextCheckAt is when the next is due.
	Checks      int        `json:"checks"`
	NextCheckAt *time.Time `json:"next_check_at,omitempty"`
}

// Event is one stored webhook event.
type Event struct {
	Provider  string `json:"provider"`
	EventID   string `json:"event_id"`
	Type      string `json:"event_type"`
	PaymentID string `json:"payment_id,omitempty"`
	// Unmapped, when set, says why this event, paid by its own word, names
	// no payment Guardian can read: it fulfilled nothing and waits for an
	// operator.
	Unmapped string `json:"unmapped,omitempty"`
	// DeliveryID is the first delivery's own id, where the provider sends
	// one beside the event's (Shopify).
	DeliveryID string `json:"delivery_id,omitempty"`
	// Reversal says what a refund or dispute event says ("full refund",
	// "dispute lost"); Reverses is the payment the policy takes back for
	// it. Both absent for other events.
	Reversal string `json:"reversal,omitempty"`
	Reverses string `json:"reverses,omitempty"`
	// Payload is absent in listings, and once pruned after the payload
	// retention (PrunedAt says when).
	Payload     json.RawMessage `json:"payload,omitempty"`
	PrunedAt    *time.Time      `json:"pruned_at,omitempty"`
	Deliveries  int             `json:"deliveries"`
	FirstSeenAt time.Time       `json:"first_seen_at"`
	LastSeenAt  time.Time       `json:"last_seen_at"`
}

// Transition is one entry of a fulfilment's append-only audit log.
type Transition struct {
	From      state.State     `json:"from_state,omitempty"`
	To        state.State     `json:"to_state"`
	Attempt   int             `json:"attempt"`
	Actor     string          `json:"actor"`
	Reason    string          `json:"reason"`
	Evidence  json.RawMessage `json:"evidence"`
	CreatedAt time.Time       `json:"created_at"`
}

// Check is one reconciliation lookup's answer.
type Check struct {
	Attempt   int             `json:"attempt"`
	Actor     string          `json:"actor"`
	Answer    string          `json:"answer"`
	Evidence  json.RawMessage `json:"evidence"`
	CreatedAt time.Time       `json:"created_at"`
}

func apiFulfilment(f db.Fulfilment) Fulfilment {
	return Fulfilment{
		ID: f.ID, Provider: f.Provider, PaymentID: f.PaymentID, State: f.State, Attempt: f.Attempt, Action: f.Action, ActionName: f.ActionName,
		IdempotencyKey: f.Key, Deadline: f.Deadline, CreatedAt: f.CreatedAt, UpdatedAt: f.UpdatedAt, DispatchedAt: f.DispatchedAt, Checks: f.Checks, NextCheckAt: f.NextCheckAt,
	}
}

func apiEvent(e db.Event) Event {
	return Event{
		Provider: e.Provider, EventID: e.EventID, Type: e.Type, PaymentID: e.PaymentID, Unmapped: e.Unmapped, DeliveryID: e.DeliveryID,
		Reversal: e.Reversal, Reverses: e.Reverses, Payload: e.Payload, PrunedAt: e.PrunedAt,
		Deliveries: e.Deliveries, FirstSeenAt: e.FirstSeenAt, LastSeenAt: e.LastSeenAt,
	}
}

func apiTransition(t db.Transition) Transition {
	return Transition{From: t.From, To: t.To, Attempt: t.Attempt, Actor: t.Actor, Reason: t.Reason, Evidence: t.Evidence, CreatedAt: t.CreatedAt}
}

func apiCheck(c db.Check) Check {
	return Check{Attempt: c.Attempt, Actor: c.Actor, Answer: c.Answer, Evidence: c.Evidence, CreatedAt: c.CreatedAt}
}

// apiList converts a slice, never returning nil, so an empty list is [].
func apiList[T, U any](in []T, conv func(T) U) []U {
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = conv(v)
	}
	return out
}
