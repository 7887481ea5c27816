package provider_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
)

// TestStripePurchase reads the one purchase shape from events built from
// Stripe's fixtures: a paid Checkout Session (its metadata, customer email
// and mode; Stripe sends no line items with it), a renewal invoice whose
// lines are priced as the 2025-03-31 API prices them and as older APIs
// did, and a payment intent paid on its own.
func TestStripePurchase(t *testing.T) {
	t.Parallel()
	objs := fixtureObjects(t)
	session, intent, invoice, line := objs["checkout.session"], objs["payment_intent"], objs["invoice"], objs["line_item"]
	now := time.Now()
	every, err := provider.NewStripe(provider.StripeConfig{Secrets: []string{stripeSecret},
		FulfilTypes: []string{"checkout.session.completed", "payment_intent.succeeded", "invoice.paid"}})
	require.NoError(t, err)
	read := func(typ string, object map[string]any, live bool) provider.Event {
		t.Helper()
		body, err := json.Marshal(map[string]any{"id": "evt_p", "object": "event", "livemode": live, "type": typ, "data": map[string]any{"object": object}})
		require.NoError(t, err)
		ev, err := every.Verify(providertest.SignStripe(body, stripeSecret, now), body, now)
		require.NoError(t, err)
		require.True(t, ev.Fulfils())
		return ev
	}
	purchase := func(ev provider.Event) map[string]any {
		b, err := json.Marshal(provider.PurchaseOf(ev, provider.ModeLive))
		require.NoError(t, err)
		var out map[string]any
		require.NoError(t, json.Unmarshal(b, &out))
		return out
	}

	paid := with(session, map[string]any{"status": "complete", "payment_status": "paid", "amount_total": 4900, "currency": "eur",
		"metadata": map[string]any{"course": "go-101", "seats": 3, "nested": map[string]any{"no": "objects"}}})
	got := purchase(read("checkout.session.completed", paid, false))
	require.Equal(t, map[string]any{
		"provider": "stripe", "id": session["payment_intent"], "kind": "one_time", "amount": 4900.0, "currency": "EUR",
		"customer": map[string]any{"email": "example@example.com"},
		"metadata": map[string]any{"course": "go-101", "seats": "3"},
		"mode":     "test",
	}, got, "the event's own livemode decides the mode; a metadata object is not a string")

	priced := with(line, map[string]any{"pricing": map[string]any{"type": "price_details", "price_details": map[string]any{"price": "price_1", "product": "prod_course"}}})
	older := map[string]any{"id": "il_2", "object": "line_item", "quantity": 2, "price": map[string]any{"id": "price_2", "product": "prod_seat"}}
	renewal := with(invoice, map[string]any{"status": "paid", "billing_reason": "subscription_cycle", "amount_paid": 6000, "currency": "usd",
		"lines": map[string]any{"object": "list", "data": []any{priced, older}}})
	got = purchase(read("invoice.paid", renewal, true))
	require.Equal(t, "renewal", got["kind"])
	require.Equal(t, map[string]any{"id": invoice["customer"]}, got["customer"])
	require.Equal(t, []any{
		map[string]any{"product": "prod_course", "price": "price_1", "quantity": 1.0},
		map[string]any{"product": "prod_seat", "price": "price_2", "quantity": 2.0},
	}, got["items"])
	require.Equal(t, "live", got["mode"])

	alone := with(intent, map[string]any{"status": "succeeded", "amount_received": 1200, "currency": "usd"})
	delete(alone, "invoice")
	got = purchase(read("payment_intent.succeeded", alone, true))
	require.Equal(t, "one_time", got["kind"])
	require.NotContains(t, got, "items", "a payment intent lists nothing bought: absent, not guessed")
	ofInvoice := with(alone, map[string]any{"invoice": "in_1"})
	require.NotContains(t, purchase(read("payment_intent.succeeded", ofInvoice, true)), "kind", "an invoice's payment intent does not say which kind")
}
