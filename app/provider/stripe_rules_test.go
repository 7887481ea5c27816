package provider_test

import (
	"encoding/json"
	"maps"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
)

// fixtureObjects reads the Stripe objects of testdata (taken from Stripe's
// published API fixtures): a payment-mode Checkout Session that is unpaid,
// its payment intent, and an invoice.
func fixtureObjects(t *testing.T) map[string]map[string]any {
	t.Helper()
	raw, err := os.ReadFile("testdata/stripe_fixture_objects.json")
	require.NoError(t, err)
	var f struct {
		Objects map[string]map[string]any `json:"objects"`
	}
	require.NoError(t, json.Unmarshal(raw, &f))
	return f.Objects
}

// with returns a copy of o with fields replaced.
func with(o map[string]any, fields map[string]any) map[string]any {
	out := maps.Clone(o)
	maps.Copy(out, fields)
	return out
}

// TestStripeRules holds the rule table of docs/design.md ("What a Stripe
// payment is") against events built from Stripe's fixtures, under the
// default configuration and with the optional types turned on.
func TestStripeRules(t *testing.T) {
	t.Parallel()
	objs := fixtureObjects(t)
	session, intent, invoice := objs["checkout.session"], objs["payment_intent"], objs["invoice"]
	pi, cs := session["payment_intent"].(string), session["id"].(string)
	require.Equal(t, "unpaid", session["payment_status"], "Stripe's own checkout.session fixture is unpaid")

	paid := with(session, map[string]any{"status": "complete", "payment_status": "paid"})
	free := with(session, map[string]any{"status": "complete", "payment_status": "no_payment_required", "payment_intent": nil})
	subscription := with(session, map[string]any{"status": "complete", "mode": "subscription", "payment_status": "paid",
		"payment_intent": nil, "subscription": "sub_1", "invoice": invoice["id"]})
	succeeded := with(intent, map[string]any{"status": "succeeded"})
	firstInvoice := with(invoice, map[string]any{"status": "paid", "billing_reason": "subscription_create"})
	renewal := with(invoice, map[string]any{"status": "paid", "billing_reason": "subscription_cycle"})

	all := []string{"checkout.session.completed", "checkout.session.async_payment_succeeded", "checkout.session.async_payment_failed",
		"payment_intent.succeeded", "invoice.paid"}
	tests := []struct {
		name      string
		eventType string
		object    map[string]any
		// wantDefault and wantAll are the payment ids under the default
		// types and with every type turned on ("" = does not fulfil).
		wantDefault, wantAll string
	}{
		{"CompletedUnpaidWaits", "checkout.session.completed", with(session, map[string]any{"status": "complete"}), "", ""},
		{"CompletedPaidFulfilsAsItsPaymentIntent", "checkout.session.completed", paid, pi, pi},
		{"AsyncSucceededFulfilsTheSamePurchase", "checkout.session.async_payment_succeeded", paid, pi, pi},
		{"AsyncFailedNever", "checkout.session.async_payment_failed", with(session, map[string]any{"status": "complete"}), "", ""},
		{"FreeFulfilsAsTheSession", "checkout.session.completed", free, cs, cs},
		{"SubscriptionFulfilsAsTheSession", "checkout.session.completed", subscription, cs, cs},
		{"PaymentIntentOnlyWhenConfigured", "payment_intent.succeeded", succeeded, "", pi},
		{"PaymentIntentNotSucceeded", "payment_intent.succeeded", intent, "", ""},
		{"FirstInvoiceIsTheCheckoutPurchase", "invoice.paid", firstInvoice, "", ""},
		{"RenewalOnlyWhenConfiguredEachInvoiceOnce", "invoice.paid", renewal, "", invoice["id"].(string)},
		{"UnknownPaymentStatusWaits", "checkout.session.completed", with(paid, map[string]any{"payment_status": "processing"}), "", ""},
	}
	def := newStripe(t, stripeSecret)
	every, err := provider.NewStripe(provider.StripeConfig{Secrets: []string{stripeSecret}, FulfilTypes: all})
	require.NoError(t, err)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body, err := json.Marshal(map[string]any{"id": "evt_" + tt.name, "object": "event", "api_version": "2025-03-31.basil",
				"type": tt.eventType, "data": map[string]any{"object": tt.object}})
			require.NoError(t, err)
			for _, c := range []struct {
				p    *provider.Stripe
				want string
			}{{def, tt.wantDefault}, {every, tt.wantAll}} {
				ev, err := c.p.Verify(providertest.SignStripe(body, stripeSecret, now), body, now)
				require.NoError(t, err, "a well-signed event is always accepted")
				require.Equal(t, c.want, ev.PaymentID)
				require.Equal(t, c.want != "", ev.Fulfils())
				require.Equal(t, string(body), string(ev.Payload))
			}
		})
	}

	t.Run("APurchaseFulfilsOnceWhateverTheOrder", func(t *testing.T) {
		t.Parallel()
		// The events of one delayed-payment purchase, in any order, name
		// one payment at most; the failed one names none.
		names := map[string]bool{}
		for _, ev := range []struct {
			typ string
			obj map[string]any
		}{
			{"checkout.session.async_payment_succeeded", paid},
			{"payment_intent.succeeded", succeeded},
			{"checkout.session.completed", with(session, map[string]any{"status": "complete"})},
			{"checkout.session.completed", paid},
		} {
			body, _ := json.Marshal(map[string]any{"id": "evt_x", "type": ev.typ, "data": map[string]any{"object": ev.obj}})
			e, err := every.Verify(providertest.SignStripe(body, stripeSecret, now), body, now)
			require.NoError(t, err)
			if e.Fulfils() {
				names[e.PaymentID] = true
			}
		}
		require.Equal(t, map[string]bool{pi: true}, names)
	})
}

// TestStripeReversals holds the reversal rows of docs/design.md's table
// against events built from Stripe's fixtures: a charge, a refund and a
// dispute of the fixture's payment intent.
func TestStripeReversals(t *testing.T) {
	t.Parallel()
	objs := fixtureObjects(t)
	pi := objs["payment_intent"]["id"].(string)
	of := func(kind string, fields map[string]any) map[string]any {
		return with(objs[kind], with(map[string]any{"payment_intent": pi}, fields))
	}
	tests := []struct {
		name, eventType string
		object          map[string]any
		want            *provider.Reversal // nil: not a reversal
	}{
		{"ChargeFullyRefunded", "charge.refunded", of("charge", map[string]any{"amount_refunded": 100, "refunded": true}), &provider.Reversal{PaymentID: pi, Kind: provider.Refund, Full: true, Amount: &provider.Money{100, "USD"}, Cumulative: true}},
		{"ChargePartlyRefunded", "charge.refunded", of("charge", map[string]any{"amount_refunded": 40, "refunded": false}), &provider.Reversal{PaymentID: pi, Kind: provider.Refund, Amount: &provider.Money{40, "USD"}, Cumulative: true}},
		{"RefundSucceeded", "refund.created", of("refund", map[string]any{"id": "re_1", "amount": 250, "currency": "eur"}), &provider.Reversal{PaymentID: pi, Kind: provider.Refund, RefundID: "re_1", Amount: &provider.Money{250, "EUR"}}},
		{"RefundPending", "refund.created", of("refund", map[string]any{"status": "pending"}), nil},
		{"RefundFailed", "refund.updated", of("refund", map[string]any{"status": "failed"}), nil},
		{"DisputeOpened", "charge.dispute.created", of("dispute", nil), &provider.Reversal{PaymentID: pi, Kind: provider.Dispute, Stage: provider.DisputeOpened}},
		{"DisputeFundsWithdrawn", "charge.dispute.funds_withdrawn", of("dispute", map[string]any{"status": "needs_response"}), &provider.Reversal{PaymentID: pi, Kind: provider.Dispute, Stage: provider.DisputeOpened}},
		{"DisputeLost", "charge.dispute.closed", of("dispute", map[string]any{"status": "lost"}), &provider.Reversal{PaymentID: pi, Kind: provider.Dispute, Stage: provider.DisputeLost}},
		{"DisputeWon", "charge.dispute.closed", of("dispute", map[string]any{"status": "won"}), &provider.Reversal{PaymentID: pi, Kind: provider.Dispute, Stage: provider.DisputeWon}},
		{"InquiryClosed", "charge.dispute.closed", of("dispute", map[string]any{"status": "warning_closed"}), nil},
		{"StripesOwnFixtureNamesNoIntent", "charge.refunded", with(objs["charge"], map[string]any{"refunded": true}), nil},
	}
	s, err := provider.NewStripe(provider.StripeConfig{Secrets: []string{"whsec_test"}})
	require.NoError(t, err)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body, err := json.Marshal(map[string]any{"id": "evt_" + tt.name, "object": "event", "type": tt.eventType, "data": map[string]any{"object": tt.object}})
			require.NoError(t, err)
			ev, err := s.Read(body)
			require.NoError(t, err)
			require.Equal(t, tt.want, ev.Reversal)
			require.False(t, ev.Fulfils(), "a reversal never fulfils")
			if tt.want == nil {
				require.NotEmpty(t, ev.Note, "says why it is no reversal")
			}
		})
	}
	require.Subset(t, s.RuleTypes(), provider.StripeReversalTypes, "the backfill lists reversals too")
}
