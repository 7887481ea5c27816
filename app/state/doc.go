// Package state is the fulfilment state machine: the states a fulfilment can
// be in, the transitions between them, and what a connector's outcome means
// for the next state. It imports nothing of Guardian's.
//
// # States
//
// The one drawing of the state machine; app/fulfilment's doc names the
// code that makes each move.
//
//	pending --> dispatching --+--> fulfilled              (the receiver said done)
//	   ^                      +--> needs_reconciliation   (outcome unknown: crash, timeout,
//	   |                      |                            5xx, 409 in progress, unsigned 4xx)
//	   |                      +--> failed                 (the receiver declined the key, signed)
//	   +-- only with proof that nothing happened: never connected, or refused
//	       before the receiver's logic (not delivered)
//	pending --> cancelled | needs_reconciliation                        (the payment was reversed,
//	                                                                      or its subscription ended,
//	                                                                      before it went out: with a
//	                                                                      lookup, its key is asked)
//	needs_reconciliation --> fulfilled | pending | failed | cancelled   (by facts: a lookup,
//	                                                                      a late answer, an operator)
//	cancelled --> needs_reconciliation                                  (an audited reopening)
//
// A revocation (a fulfilment row whose action is revoke: taking back what a
// refund or dispute reversed) moves through the same states.
//
// failed and fulfilled are final; failed alone frees the payment for its
// next key. cancelled keeps the payment: only a reopening, on the same row
// and key, moves it on.
//
// # Failure handling
//
// A fulfilment enters dispatching, with a new attempt number, in a committed
// transaction before the connector is called. From there only a fact moves it:
// the connector's answer, a lookup by idempotency key, or an operator with a
// reason. Where the outcome cannot be known (a crash, a timeout, a reset
// connection, a 5xx) the fulfilment goes to needs_reconciliation and stays
// there until a fact arrives; it is never retried on a guess.
//
// The same table of allowed transitions is enforced by a trigger in the
// database (goose/migrations), so an illegal transition fails in SQL as well.
package state
