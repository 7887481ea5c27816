package state

import "fmt"

// Outcome is what is known about one connector call, by fact.
type Outcome int

const (
	// Unknown means the call may or may not have taken effect: a timeout, a
	// reset connection, a 5xx, a malformed answer, a crash.
	Unknown Outcome = iota
	// Done means the receiver confirmed the action (2xx).
	Done
	// NotSent means the request provably never left: the connection was
	// refused or never established, so nothing can have happened.
	NotSent
	// Declined means the receiver said, signed with the connector secret,
	// that it declined the key: nothing was done, and nothing will be for
	// that key. It is the one outcome that frees a payment for a new key.
	Declined
	// NotDelivered means the request was refused before it reached the
	// receiver's business logic (authentication, routing, transport: 401,
	// 403, 404, ...): nothing was done, and the call is retried with
	// backoff, never given up on.
	NotDelivered
	// Refused means a 4xx that is not the receiver's signed word (400, 422
	// from a framework, an idempotency layer or a proxy): it is no proof
	// that nothing was done for the key, so the fulfilment is parked, and
	// a signed lookup "not done" (or "declined") then fails it.
	Refused
)

// String returns the outcome's name as it appears in evidence.
func (o Outcome) String() string {
	switch o {
	case Done:
		return "done"
	case NotSent:
		return "not_sent"
	case Declined:
		return "declined"
	case NotDelivered:
		return "not_delivered"
	case Refused:
		return "refused"
	default:
		return "unknown"
	}
}

// Outcomes lists every outcome.
var Outcomes = []Outcome{Unknown, Done, NotSent, Declined, NotDelivered, Refused}

// Scan reads an outcome by its name, as the database stores it
// (fulfilment.call_outcome): it makes *Outcome a database/sql Scanner.
func (o *Outcome) Scan(src any) error {
	var name string
	switch v := src.(type) {
	case string:
		name = v
	case []byte:
		name = string(v)
	default:
		return fmt.Errorf("outcome: cannot scan %T", src)
	}
	for _, c := range Outcomes {
		if c.String() == name {
			*o = c
			return nil
		}
	}
	return fmt.Errorf("unknown outcome %q", name)
}

// AfterDispatch returns the state a dispatching fulfilment moves to once its
// connector call ended with o.
func AfterDispatch(o Outcome) State {
	switch o {
	case Done:
		return Fulfilled
	case NotSent, NotDelivered:
		return Pending
	case Declined:
		return Failed
	default: // Unknown, Refused
		return NeedsReconciliation
	}
}
