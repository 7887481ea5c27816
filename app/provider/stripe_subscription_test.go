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
	require.Subset(t, stripe.RuleTypes(), provider.StripeSubscriptionTypes, "a backfill lists the ends too")
	read := signedStripe(t, stripe)

	start := with(session, map[string]any{"mode": "subscription", "status": "complete", "payment_status": "paid", "payment_intent": nil, "subscription": sub["id"]})
	ev := read("checkout.session.completed", start)
	require.Equal(t, session["id"], ev.PaymentID, "the purchase is the session, as before subscriptions were known: no key changes")
	require.Equal(t, sub["id"], ev.Subscription)
	require.Equal(t, provider.SubscriptionStart, ev.Purchase.Kind)
	oneTime := with(session, map[string]any{"status": "complete", "payment_status": "paid"})
	require.Empty(t, read("checkout.session.completed", oneTime).Subscription, "a payment-mode session starts no subscription")

	ended := &provider.Reversal{Kind: provider.End, Subscription: sub["id"].(string)}
	pastDue := &provider.Reversal{Kind: provider.Suspension, Subscription: sub["id"].(string), Standing: provider.PastDue}
	paused := &provider.Reversal{Kind: provider.Suspension, Subscription: sub["id"].(string), Standing: provider.Paused}
	for _, tt := range []struct {
		typ     string
		fields  map[string]any
		want    *provider.Reversal
		resumes bool
	}{
		{"customer.subscription.updated", map[string]any{"status": "active", "cancel_at_period_end": true}, nil, true}, // the cancel click
		{"customer.subscription.updated", map[string]any{"status": "past_due", "cancel_at_period_end": false}, pastDue, false},
		{"customer.subscription.updated", map[string]any{"status": "paused", "cancel_at_period_end": false}, paused, false},
		{"customer.subscription.paused", map[string]any{"status": "paused"}, paused, false},
		{"customer.subscription.resumed", map[string]any{"status": "active"}, nil, true},
		{"customer.subscription.updated", map[string]any{"status": "active", "cancel_at_period_end": false}, nil, true}, // reactivated
		{"customer.subscription.updated", map[string]any{"status": "trialing"}, nil, true},
		{"customer.subscription.updated", map[string]any{"status": "incomplete"}, nil, false},
		{"customer.subscription.updated", map[string]any{"status": "unpaid"}, ended, false},
		{"customer.subscription.updated", map[string]any{"status": "canceled"}, ended, false},
		{"customer.subscription.updated", map[string]any{"status": "incomplete_expired"}, ended, false},
		{"customer.subscription.deleted", map[string]any{"status": "canceled"}, ended, false},
	} {
		ev := read(tt.typ, with(sub, tt.fields))
		require.False(t, ev.Fulfils(), "%s %v", tt.typ, tt.fields)
		require.Equal(t, tt.want, ev.Reversal, "%s %v", tt.typ, tt.fields)
		require.Equal(t, tt.resumes, ev.Resumes == sub["id"], "%s %v", tt.typ, tt.fields)
		require.Equal(t, tt.want != nil || tt.resumes, !ev.StandingAt.IsZero(), "%s %v: the signed time of a standing", tt.typ, tt.fields)
		if tt.want == nil && !tt.resumes {
			require.NotEmpty(t, ev.Note, "why not, for the log")
		}
	}
	require.Equal(t, "subscription ended", ended.String())
	require.Equal(t, "subscription past due", pastDue.String())
	notASub := read("customer.subscription.deleted", with(sub, map[string]any{"object": "invoice", "id": "in_1"}))
	require.Nil(t, notASub.Reversal)
	require.True(t, slices.Contains(provider.StripeSubscriptionTypes, "customer.subscription.deleted"))
}

// TestStripeSubscriptionInvoices reads which payment paid which of a
// subscription's invoices from Stripe's fixtures (the 2025-03-31 API's
// invoice, naming its subscription under parent.subscription_details,
// and invoice_payment, joining an invoice to its payment intent) and from
// a charge as the APIs before it send one, signed as Stripe signs. A
// refund names only the payment intent: these are what place it.
func TestStripeSubscriptionInvoices(t *testing.T) {
	t.Parallel()
	objs := fixtureObjects(t)
	stripe, err := provider.NewStripe(provider.StripeConfig{Secrets: []string{stripeSecret}})
	require.NoError(t, err)
	require.Subset(t, stripe.RuleTypes(), provider.StripeInvoiceTypes, "a backfill lists them too")
	read := signedStripe(t, stripe)
	invoice := objs["invoice"]
	parent := with(invoice["parent"].(map[string]any), map[string]any{"subscription_details": map[string]any{"subscription": "sub_fx"}})
	first := read("invoice.paid", with(invoice, map[string]any{"id": "in_fx", "parent": parent, "billing_reason": "subscription_create"}))
	require.Equal(t, &provider.Invoice{ID: "in_fx", Subscription: "sub_fx", First: true}, first.Invoice)
	require.False(t, first.Fulfils(), "invoice.paid is not a default fulfilling type: it states its invoice only")
	renewal := read("invoice.paid", with(invoice, map[string]any{"id": "in_fx2", "parent": parent, "billing_reason": "subscription_cycle"}))
	require.Equal(t, &provider.Invoice{ID: "in_fx2", Subscription: "sub_fx"}, renewal.Invoice)

	payment := objs["invoice_payment"]
	paid := read("invoice_payment.paid", with(payment, map[string]any{"invoice": "in_fx", "payment": map[string]any{"type": "payment_intent", "payment_intent": "pi_fx"}}))
	require.Equal(t, &provider.Invoice{ID: "in_fx", Payment: "pi_fx"}, paid.Invoice)

	// Before the 2025-03-31 API a charge named its invoice: its refund
	// places itself.
	charge := with(objs["charge"], map[string]any{"invoice": "in_old", "payment_intent": "pi_old", "refunded": true})
	refunded := read("charge.refunded", charge)
	require.Equal(t, &provider.Invoice{ID: "in_old", Payment: "pi_old"}, refunded.Invoice)
	require.Equal(t, "pi_old", refunded.Reversal.PaymentID)

	session := with(objs["checkout.session"], map[string]any{"mode": "subscription", "payment_status": "paid", "payment_intent": nil, "subscription": "sub_fx", "invoice": "in_fx"})
	require.Equal(t, &provider.Invoice{ID: "in_fx", Subscription: "sub_fx", First: true}, read("checkout.session.completed", session).Invoice)

	// What states no subscription's invoice states nothing: a one-off
	// invoice with no payment named, an id of another kind.
	require.Nil(t, read("invoice.paid", with(invoice, map[string]any{"id": "in_x", "parent": nil, "subscription": nil, "billing_reason": "manual"})).Invoice)
	require.Nil(t, read("invoice_payment.paid", with(payment, map[string]any{"invoice": "cs_not_an_invoice", "payment": map[string]any{"payment_intent": "pi_x"}})).Invoice)
}

// signedStripe returns a reader of events of one type and object, built
// as Stripe builds them and signed as it signs, through stripe's Verify.
func signedStripe(t *testing.T, stripe *provider.Stripe) func(typ string, object map[string]any) provider.Event {
	now := time.Now()
	return func(typ string, object map[string]any) provider.Event {
		t.Helper()
		body, err := json.Marshal(map[string]any{"id": "evt_" + typ, "object": "event", "created": now.Unix(), "livemode": false, "type": typ, "data": map[string]any{"object": object}})
		require.NoError(t, err)
		ev, err := stripe.Verify(providertest.SignStripe(body, stripeSecret, now), body, now)
		require.NoError(t, err)
		return ev
	}
}
