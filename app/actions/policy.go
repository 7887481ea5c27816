package actions

import (
	"fmt"
	"slices"
	"strings"

	"github.com/guardian-pay/guardian/app/provider"
)

// Reason is one reason a take-back policy takes a done action back for.
type Reason string

// The reasons a policy may take an action back for.
const (
	// FullRefund: a refund of the whole payment.
	FullRefund Reason = "full_refund"
	// AnyRefund: any refund, partial ones included.
	AnyRefund Reason = "any_refund"
	// DisputeOpened: a dispute opened (the funds are held or withdrawn
	// while it runs).
	DisputeOpened Reason = "dispute_opened"
	// DisputeLost: a dispute lost.
	DisputeLost Reason = "dispute_lost"
	// SubscriptionEnded: the subscription the purchase started ended
	// (cancelled and its paid period over, expired, or unpaid after the
	// provider's retries).
	SubscriptionEnded Reason = "subscription_ended"
	// SubscriptionSuspended: the subscription the purchase started is past
	// due (its provider still retrying a payment) or paused. Taken back
	// then, and granted again once when it is active again; off by
	// default (kept).
	SubscriptionSuspended Reason = "subscription_suspended"
)

// AllReasons lists every reason, in the order an operator reads them.
var AllReasons = []Reason{FullRefund, AnyRefund, DisputeOpened, DisputeLost, SubscriptionEnded, SubscriptionSuspended}

// Policy is the set of reasons an action is taken back for. An action is
// taken back at most once whatever number of its payment's reversals
// match; an empty policy ("none") never takes it back, and its receiver is
// never sent a revoke.
type Policy []Reason

// DefaultPolicy takes an action back on a full refund and on a dispute
// lost, the money gone for good, and when the subscription it was granted
// for ends: a subscription's access ends with it. A partial refund (a
// goodwill discount) and an open dispute (which the merchant may win)
// leave it.
var DefaultPolicy = Policy{FullRefund, DisputeLost, SubscriptionEnded}

// ParsePolicy reads a comma-separated policy ("full_refund,
// dispute_lost"); "none" takes nothing back.
func ParsePolicy(s string) (Policy, error) {
	if strings.TrimSpace(s) == "none" {
		return Policy{}, nil
	}
	return parseReasons(strings.Split(s, ","))
}

// parseReasons reads a policy's reasons, one by one.
func parseReasons(parts []string) (Policy, error) {
	p := Policy{}
	for _, part := range parts {
		r := Reason(strings.TrimSpace(part))
		if !slices.Contains(AllReasons, r) {
			names := make([]string, len(AllReasons))
			for i, a := range AllReasons {
				names[i] = string(a)
			}
			return nil, fmt.Errorf("%q is not one of %s, or none", r, strings.Join(names, ", "))
		}
		if !slices.Contains(p, r) {
			p = append(p, r)
		}
	}
	return p, nil
}

// Revokes reports whether the policy takes an action back for r.
func (p Policy) Revokes(r provider.Reversal) bool {
	switch r.Kind {
	case provider.Refund:
		return slices.Contains(p, AnyRefund) || (r.Full && slices.Contains(p, FullRefund))
	case provider.Dispute:
		return (r.Stage == provider.DisputeOpened && slices.Contains(p, DisputeOpened)) ||
			(r.Stage == provider.DisputeLost && (slices.Contains(p, DisputeLost) || slices.Contains(p, DisputeOpened)))
	case provider.End:
		return slices.Contains(p, SubscriptionEnded)
	case provider.Suspension:
		return slices.Contains(p, SubscriptionSuspended)
	}
	return false
}

// String is the policy as ParsePolicy reads it.
func (p Policy) String() string {
	if len(p) == 0 {
		return "none"
	}
	names := make([]string, len(p))
	for i, r := range p {
		names[i] = string(r)
	}
	return strings.Join(names, ",")
}
