// Package fulfilment is Guardian's domain: every move of a fulfilment
// between states happens here, and nowhere else. The River workers in jobs/
// and the Echo handlers in web/ translate (arguments, retries, status codes)
// and call a Service; they decide nothing.
//
// # States
//
// The state machine is drawn once, in app/state's doc. Every move is one
// conditional UPDATE naming the state (and, once dispatched, the attempt)
// it expects, logged in the same statement; zero rows means someone else
// moved the row first. The database refuses moves the state machine does
// not allow (app/state holds the same table).
//
// # Where each move lives
//
//   - Accept (intake.go, its group commit an app/batch.Gatherer): a
//     verified event is stored once; a fulfilling one creates the payment's
//     pending fulfilment, under the payment's key, and its dispatch job in
//     the same transaction. Replay runs a stored event through the same
//     path.
//   - Take back (reversal.go): a reversal the policy takes back for stops
//     the payment's pending fulfilment (with a lookup pending ->
//     needs_reconciliation, to ask the receiver whether it acted before a
//     restore made the rows forget; without, pending -> cancelled) and
//     gives a fulfilled one a revocation (a new row, action revoke,
//     pending); one in flight or parked waits for its facts, and the sweep
//     takes it back once it settles fulfilled. A payment event after its
//     reversal makes its fulfilment born needs_reconciliation (with a
//     lookup) or none. A refund that does not say whether it is whole is
//     weighed against the payment's paid amount first.
//   - Dispatch (dispatch.go): pending -> dispatching (claim, committed
//     before the call, with its deadline), then by the call's outcome to
//     fulfilled, failed (a signed decline), needs_reconciliation (unknown,
//     409, an unsigned refusal) or back to pending (not sent, not
//     delivered). A row found dispatching is parked; a late success settles
//     a parked row.
//   - Sweep (sweep.go): dispatching past its lease and its claim's own
//     deadline -> needs_reconciliation; a pending row with no live job gets
//     one.
//   - Reconcile (reconcile.go): a lookup's "done" -> fulfilled (and taken
//     back at once if the payment was reversed); "not done" -> pending with
//     a new dispatch under the same key, or failed when the parked call was
//     refused (the row's call_outcome), or cancelled when the payment was
//     reversed; "declined" -> failed; "in progress" and "cannot tell" leave
//     it parked.
//   - Recheck (bulk.go): the reconciler's lookup, asked now by an operator.
//   - Retry (bulk.go): a failed fulfilment's event through intake again: a
//     new fulfilment under the payment's next key.
//   - Resolve and Reopen (resolve.go): an operator's fulfilled, pending or
//     cancelled; a cancelled row back to needs_reconciliation.
//
// # Failure handling
//
// Nothing here retries on a guess. A crash between the claim and the
// record leaves the row dispatching; the job's retry or the sweep parks it,
// and only a fact (a late answer, a lookup, an operator) moves it on. The
// call's deadline counts from before the claim, so a dispatcher frozen
// after claiming cannot wake and send after its lease could have run out.
package fulfilment
