package state

import "fmt"

// State is where a fulfilment stands. Its string form is what the database
// stores and what operators see.
type State string

const (
	// Pending means the fulfilment is recorded and waits for a dispatcher.
	Pending State = "pending"
	// Dispatching means a dispatcher has claimed an attempt and may be calling
	// the connector right now.
	Dispatching State = "dispatching"
	// Fulfilled means the connector confirmed the action was done.
	Fulfilled State = "fulfilled"
	// NeedsReconciliation means the action may or may not have happened;
	// only a fact (a lookup, a late answer, an operator) may move it on.
	NeedsReconciliation State = "needs_reconciliation"
	// Failed means the receiver declined the fulfilment's key, in its own
	// signed word: nothing was done. The payment is free for a later event,
	// which is sent under the payment's next key.
	Failed State = "failed"
	// Cancelled is an operator's final word on a payment whose parked call
	// may have acted, or a payment reversed (refunded, disputed) before its
	// fulfilment went out: the payment stays taken, so nothing sends it
	// again under another key. Only an audited reopening (back to
	// needs_reconciliation, same row and key) moves it on.
	Cancelled State = "cancelled"
)

// All lists every state, in the order an operator reads them.
var All = []State{Pending, Dispatching, Fulfilled, NeedsReconciliation, Failed, Cancelled}

// Parse returns the State named s, or an error for an unknown name.
func Parse(s string) (State, error) {
	for _, st := range All {
		if string(st) == s {
			return st, nil
		}
	}
	return "", fmt.Errorf("unknown state %q", s)
}

// Terminal reports whether no transition leaves s.
func (s State) Terminal() bool {
	return s == Fulfilled || s == Failed
}

// Transition is one allowed move between two states.
type Transition struct {
	From, To State
}

// Transitions lists every allowed move. The trigger guardian_fulfilment_guard
// in the migrations holds the same list; a test keeps the two equal.
var Transitions = []Transition{
	{Pending, Dispatching},
	{Pending, Cancelled},
	{Pending, NeedsReconciliation},
	{Dispatching, Fulfilled},
	{Dispatching, NeedsReconciliation},
	{Dispatching, Failed},
	{Dispatching, Pending},
	{NeedsReconciliation, Fulfilled},
	{NeedsReconciliation, Pending},
	{NeedsReconciliation, Cancelled},
	{NeedsReconciliation, Failed},
	{Cancelled, NeedsReconciliation},
}

// Allowed reports whether a fulfilment may move from one state to another.
func Allowed(from, to State) bool {
	for _, t := range Transitions {
		if t.From == from && t.To == to {
			return true
		}
	}
	return false
}
