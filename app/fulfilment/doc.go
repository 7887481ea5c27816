// Package fulfilment is Guardian's domain: every move of a fulfilment
// between states happens here, and nowhere else. The River workers in jobs/
// and the Echo handlers in web/ translate (arguments, retries, status codes)
// and call a Service; they decide nothing.
//
// # States
//
//	pending --> dispatching --+--> fulfilled              (connector said done)
//	   ^                      +--> needs_reconciliation   (outcome unknown)
//	   |                      +--> failed                 (rejected: nothing done)
//	   +-- (only with proof that nothing happened)
//	needs_reconciliation --> fulfilled | pending | cancelled   (by facts)
//
// Every move is one conditional UPDATE naming the state (and, once
// dispatched, the attempt) it expects, logged in the same statement; zero
// rows means someone else moved the row first. The database refuses moves
// the state machine does not allow (app/state holds the same table).
//
// # Where each move lives
//
//   - Accept (intake.go): a verified event is stored once; a fulfilling one
//     creates the payment's pending fulfilment and its dispatch job in the
//     same transaction. Replay runs a stored event through the same path.
//   - Dispatch (dispatch.go): pending -> dispatching (claim, committed before
//     the call), then by the call's outcome to fulfilled, failed,
//     needs_reconciliation or back to pending (not sent). A row found
//     dispatching is parked; a late success settles a parked row.
//   - Sweep (sweep.go): dispatching past its lease -> needs_reconciliation.
//   - Reconcile (reconcile.go): a lookup's "done" -> fulfilled, "not done"
//     -> pending with a new dispatch; "cannot tell" leaves it parked.
//   - Resolve (resolve.go): an operator's fulfilled, pending or cancelled.
//
// # Failure handling
//
// Nothing here retries on a guess. A crash between the claim and the
// record leaves the row dispatching; the job's retry or the sweep parks it,
// and only a fact (a late answer, a lookup, an operator) moves it on. The
// call's deadline counts from before the claim, so a dispatcher frozen
// after claiming cannot wake and send after its lease could have run out.
package fulfilment
