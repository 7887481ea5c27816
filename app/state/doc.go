// Package state is the fulfilment state machine: the states a fulfilment can
// be in, the transitions between them, and what a connector's outcome means
// for the next state. It imports nothing of Guardian's.
//
// # States
//
//	pending --> dispatching --+--> fulfilled              (connector said done)
//	   ^                      +--> needs_reconciliation   (outcome unknown)
//	   |                      +--> failed                 (definitively rejected)
//	   +-- only with proof that nothing happened
//	needs_reconciliation --> fulfilled | pending | cancelled   (by facts)
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
