package provider_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
)

// TestStripeSubscriptionLife reads a subscription's life from events built
// from Stripe's fixtures, signed as Stripe signs: a subscription-mode
// Checkout Session starts it (its purchase is the session, and names the
// subscription); a cancellation at the period's end and a past-due renewal
// do not end it; the deletion, and an update whose status is canceled or
// unpaid, do.
func TestStripeSubscriptionLife(t *testing.T) {
	t.Parallel()
	objs := fixtureObjects(t)
	session, sub := objs["checkout.session"], objs["subscription"]
	stripe, err := provider.NewStripe(provider.StripeConfig{Secrets: []string{stripeSecret}})
	require.NoError(t, err)
	require.Subset(t, stripe.RuleTypes(), provider.StripeEndTypes, "a backfill lists the ends too")
	now := time.Now()
	read := func(typ string, object map[string]any) provider.Event {
		t.Helper()
		body, err := json.Marshal(map[string]any{"id": "evt_s", "object": "event", "livemode": false, "type": typ, "data": map[string]any{"object": object}})
		require.NoError(t, err)
		ev, err := stripe.Verify(providertest.SignStripe(body, stripeSecret, now), body, now)
		require.NoError(t, err)
		return ev
	}

	start := with(session, map[string]any{"mode": "subscription", "status": "complete", "payment_status": "paid", "payment_intent": nil, "subscription": sub["id"]})
	ev := read("checkout.session.completed", start)
	require.Equal(t, session["id"], ev.PaymentID, "the purchase is the session, as before subscriptions were known: no key changes")
	require.Equal(t, sub["id"], ev.Subscription)
	require.Equal(t, provider.SubscriptionStart, ev.Purchase.Kind)
	oneTime := with(session, map[string]any{"status": "complete", "payment_status": "paid"})
	require.Empty(t, read("checkout.session.completed", oneTime).Subscription, "a payment-mode session starts no subscription")

	for _, tt := range []struct {
		typ    string
		fields map[string]any
		ends   bool
	}{
		{"customer.subscription.updated", map[string]any{"status": "active", "cancel_at_period_end": true}, false},
		{"customer.subscription.updated", map[string]any{"status": "past_due", "cancel_at_period_end": false}, false},
		{"customer.subscription.updated", map[string]any{"status": "paused", "cancel_at_period_end": false}, false},
		{"customer.subscription.updated", map[string]any{"status": "active", "cancel_at_period_end": false}, false}, // reactivated
		{"customer.subscription.updated", map[string]any{"status": "unpaid"}, true},
		{"customer.subscription.updated", map[string]any{"status": "canceled"}, true},
		{"customer.subscription.updated", map[string]any{"status": "incomplete_expired"}, true},
		{"customer.subscription.deleted", map[string]any{"status": "canceled"}, true},
	} {
		ev := read(tt.typ, with(sub, tt.fields))
		require.False(t, ev.Fulfils(), "%s %v", tt.typ, tt.fields)
		if !tt.ends {
			require.Nil(t, ev.Reversal, "%s %v", tt.typ, tt.fields)
			require.NotEmpty(t, ev.Note, "why not, for the log")
			continue
		}
		require.Equal(t, &provider.Reversal{Kind: provider.End, Subscription: sub["id"].(string)}, ev.Reversal, "%s %v", tt.typ, tt.fields)
		require.Equal(t, "subscription ended", ev.Reversal.String())
	}
	notASub := read("customer.subscription.deleted", with(sub, map[string]any{"object": "invoice", "id": "in_1"}))
	require.Nil(t, notASub.Reversal)
	require.True(t, slices.Contains(provider.StripeEndTypes, "customer.subscription.deleted"))
}
