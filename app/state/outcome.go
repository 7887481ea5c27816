package state

// Outcome is what is known about one connector call, by fact.
type Outcome int

const (
	// Unknown means the call may or may not have taken effect: a timeout, a
	// reset connection, a 5xx, a malformed answer, a crash.
	Unknown Outcome = iota
	// Done means the connector confirmed the action (2xx, or 409 "already
	// done for this key").
	Done
	// NotSent means the request provably never left: the connection was
	// refused or never established, so nothing can have happened.
	NotSent
	// Rejected means the connector definitively refused: nothing was done.
	Rejected
	// NotDelivered means the request was refused before it reached the
	// receiver's business logic (authentication, routing, transport: 401,
	// 403, 404, ...): nothing was done, and the call is retried with
	// backoff, never given up on.
	NotDelivered
)

// String returns the outcome's name as it appears in evidence.
func (o Outcome) String() string {
	switch o {
	case Done:
		return "done"
	case NotSent:
		return "not_sent"
	case Rejected:
		return "rejected"
	case NotDelivered:
		return "not_delivered"
	default:
		return "unknown"
	}
}

// AfterDispatch returns the state a dispatching fulfilment moves to once its
// connector call ended with o.
func AfterDispatch(o Outcome) State {
	switch o {
	case Done:
		return Fulfilled
	case NotSent, NotDelivered:
		return Pending
	case Rejected:
		return Failed
	default:
		return NeedsReconciliation
	}
}
