package provider

// ReversalKind says how a purchase is taken back: money went back (a refund
// the merchant gave, a dispute the buyer opened with their bank), or a
// subscription ended.
type ReversalKind string

// The kinds of reversal.
const (
	Refund  ReversalKind = "refund"
	Dispute ReversalKind = "dispute"
	// End: a subscription ended by its provider's rule (its cancellation
	// took effect, it expired, or it is unpaid after the provider's
	// retries): what its start granted is taken back by the policy
	// (docs/design.md, "Subscriptions").
	End ReversalKind = "end"
	// Suspension: a subscription past due (its provider still retrying
	// a payment) or paused. What its start granted is taken back by the
	// policy (subscription_suspended, off by default: kept), and granted
	// again once, when it is active again (Event.Resumes).
	Suspension ReversalKind = "suspension"
)

// Standing is a subscription's standing as a suspension states it.
type Standing string

// The standings a suspension tells apart, for the record.
const (
	PastDue Standing = "past_due"
	Paused  Standing = "paused"
)

// DisputeStage says where a dispute stands.
type DisputeStage string

// The stages of a dispute Guardian tells apart.
const (
	// DisputeOpened: the buyer disputed the payment; the funds are held or
	// withdrawn while it runs.
	DisputeOpened DisputeStage = "opened"
	// DisputeWon: closed in the merchant's favour; the funds came back.
	DisputeWon DisputeStage = "won"
	// DisputeLost: closed in the buyer's favour; the funds are gone.
	DisputeLost DisputeStage = "lost"
)

// Reversal is what a refund or dispute event says about a payment, by the
// provider's rules (docs/design.md, the reversal table): which payment,
// refund or dispute, whole or in part, and where a dispute stands. Whether
// it takes the fulfilment back is the deployment's policy
// (actions.Policy), not the provider's.
type Reversal struct {
	// PaymentID is the payment reversed, named as the provider's paying
	// event names it (Stripe: the payment intent).
	PaymentID string
	Kind      ReversalKind
	// Full says a refund returned the whole payment; false is a partial
	// refund, or one whose share the event does not say.
	Full bool
	// Stage is a dispute's; empty for a refund.
	Stage DisputeStage
	// Amount is what a refund returned, where its signed fields say: this
	// refund's own amount, or, when Cumulative, everything refunded of the
	// payment so far. Whether a refund is whole is then decided against
	// the amount the payment's own paid event states (Event.Paid), also
	// when the event itself does not say (fulfilment, "Whole refunds").
	Amount *Money
	// Cumulative says Amount is the payment's refunded total so far, not
	// this refund's alone.
	Cumulative bool
	// RefundID names the refund, so that the several events one refund
	// sends (Stripe's refund.created, refund.updated) count once.
	RefundID string
	// Subscription names the subscription an End ends or a Suspension
	// suspends, by the provider's id; PaymentID is then empty: intake
	// finds the purchase its start paid for (Event.Subscription), now or
	// when the start arrives.
	Subscription string
	// Standing is a Suspension's: past due or paused.
	Standing Standing
}

// String describes the reversal in a few words, for the event's record.
func (r Reversal) String() string {
	switch {
	case r.Kind == End:
		return "subscription ended"
	case r.Kind == Suspension && r.Standing == Paused:
		return "subscription paused"
	case r.Kind == Suspension:
		return "subscription past due"
	case r.Kind == Dispute:
		return "dispute " + string(r.Stage)
	case r.Full:
		return "full refund"
	}
	return "partial refund"
}
