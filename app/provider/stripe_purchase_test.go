package provider_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
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
	ev := read("checkout.session.completed", paid, false)
	require.Equal(t, session["id"], ev.ItemsRef, "a session's event names the session whose line items Stripe's API lists")
	got := purchase(ev)
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
	ev = read("invoice.paid", renewal, true)
	require.Empty(t, ev.ItemsRef, "an invoice lists its lines itself")
	got = purchase(ev)
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

// TestStripeAPIListsACheckoutSessionsItems reads a Checkout Session's line
// items as Stripe's API answers them (its published fixture for the item
// resource) from a fake of the API on loopback: the key goes in the
// Authorization header and nowhere else, a product given expanded is read
// by its id, and an error says what Stripe said without the key.
func TestStripeAPIListsACheckoutSessionsItems(t *testing.T) {
	t.Parallel()
	const key = "sk_test_items_key_never_in_an_error"
	item := fixtureObjects(t)["item"]
	expanded := with(item, map[string]any{"id": "li_2", "quantity": 3,
		"price": map[string]any{"id": "price_team", "object": "price", "product": map[string]any{"id": "prod_team", "object": "product"}}})
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.String())
		if r.Header.Get("Authorization") != "Bearer "+key {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.URL.Path != "/v1/checkout/sessions/cs_test_1/line_items" {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"message":"No such checkout.session: 'cs_gone'","type":"invalid_request_error"}}`))
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "has_more": false, "url": r.URL.Path, "data": []any{item, expanded}})
	}))
	t.Cleanup(srv.Close)
	api, err := provider.NewStripeAPI(key, srv.URL)
	require.NoError(t, err)

	items, err := api.Items(t.Context(), "cs_test_1")
	require.NoError(t, err)
	one, three := int64(1), int64(3)
	require.Equal(t, []provider.Item{
		{Product: "prod_QXg1hqf4jFNsqG", Price: "price_1PgafmB7WZ01zgkW02Hf9z6c", Quantity: &one},
		{Product: "prod_team", Price: "price_team", Quantity: &three},
	}, items)
	require.Equal(t, []string{"/v1/checkout/sessions/cs_test_1/line_items?limit=100"}, asked, "one page: a session holds at most 100 line items")

	_, err = api.Items(t.Context(), "cs_gone")
	require.ErrorContains(t, err, "404")
	require.ErrorContains(t, err, "No such checkout.session")
	require.NotContains(t, err.Error(), key)

	for _, bad := range []string{"", "pi_1", "cs_1/../../v1/customers", "cs_1?expand=x", "cs_%2e%2e"} {
		_, err := api.Items(t.Context(), bad)
		require.Error(t, err, bad)
	}
	require.Len(t, asked, 2, "a reference that is not a session id is never sent")
}
