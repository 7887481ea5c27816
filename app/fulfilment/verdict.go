package fulfilment

// Verdict is what one lookup of a parked fulfilment, or an operator's bulk
// action, did to one fulfilment. Every verdict is in this file; the API
// and the dashboard show them as they are.
type Verdict string

// What a lookup led to.
const (
	// CheckFulfilled: the connector said done; the fulfilment is fulfilled.
	CheckFulfilled Verdict = "fulfilled"
	// CheckRedispatched: the connector said not done; the fulfilment is pending
	// with a new dispatch under the same Idempotency-Key.
	CheckRedispatched Verdict = "redispatched"
	// CheckFailed: the receiver declined the key, or said nothing was done
	// for a key it had refused; the fulfilment is failed and its payment
	// free for its next key.
	CheckFailed Verdict = "failed"
	// CheckCancelled: the connector said not done for a fulfilment whose
	// payment was taken back; the fulfilment is cancelled, never sent.
	CheckCancelled Verdict = "cancelled"
	// CheckInProgress: the receiver is still processing the key; the answer
	// is recorded and the fulfilment stays parked until a later lookup.
	CheckInProgress Verdict = "in_progress"
	// CheckUndecided: the connector could not tell; the answer is recorded and
	// the fulfilment stays parked.
	CheckUndecided Verdict = "cannot_tell"
	// CheckMoved: the fulfilment moved while the lookup ran; its answer was
	// neither applied nor recorded.
	CheckMoved Verdict = "moved"
)

// What a retry did to one failed fulfilment.
const (
	// RetryCreated: a new pending fulfilment for the payment, dispatched.
	RetryCreated Verdict = "retried"
	// RetryPaymentHeld: another fulfilment already holds the payment
	// (pending, in flight, fulfilled, parked or cancelled); nothing created.
	RetryPaymentHeld Verdict = "payment_held"
	// RetryNotFailed: the fulfilment is not failed; nothing done.
	RetryNotFailed Verdict = "not_failed"
	// BulkNotFound: no fulfilment has the id.
	BulkNotFound Verdict = "not_found"
	// BulkFailed: the fulfilment's transaction could not be written
	// (storage unavailable); nothing was changed for it.
	BulkFailed Verdict = "error"
)

// What a re-check did besides a lookup's own results.
const (
	// CheckNotParked: the fulfilment is not needs_reconciliation.
	CheckNotParked Verdict = "not_parked"
	// CheckWithinGrace: parked less than the reconcile grace ago, so its
	// call could still be running at the receiver: not looked up.
	CheckWithinGrace Verdict = "within_grace"
	// CheckNotReached: the request's time ran out first; the reconciler
	// will look it up in its own time.
	CheckNotReached Verdict = "not_reached"
	// CheckNoLookup: the fulfilment's action has no lookup here; nothing
	// was asked.
	CheckNoLookup Verdict = "no_lookup"
)
