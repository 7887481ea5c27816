package provider_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
)

// TestLemonSqueezySignature: the hex HMAC-SHA256 of the body, as Lemon
// Squeezy documents it. The expected value was computed apart from Go, by
// `printf '%s' '{"meta":{"event_name":"order_created"}}' | openssl dgst
// -sha256 -hmac guardian-ls-vector`: Lemon Squeezy publishes no vector.
func TestLemonSqueezySignature(t *testing.T) {
	t.Parallel()
	const secret, body = "guardian-ls-vector", `{"meta":{"event_name":"order_created"}}`
	const want = "330e50796aba29a740ba15303e09d1e7d93a3ec21148d8cd36781b3a811dbdaf"
	if got := providertest.SignLemonSqueezy([]byte(body), secret, "order_created").Get("X-Signature"); got != want {
		t.Fatalf("providertest.SignLemonSqueezy = %s, want %s", got, want)
	}
	fixture := loadTestdata(t, "lemonsqueezy/order_created.json", nil)
	const current, retired = "ls_signing_secret_current_0123456789", "ls_signing_secret_retired_0123456789"
	l, err := provider.NewLemonSqueezy(provider.LemonSqueezyConfig{Secrets: []string{retired, current}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		header http.Header
		body   []byte
		want   error
	}{
		{"Signed", providertest.SignLemonSqueezy(fixture, current, "order_created"), fixture, nil},
		{"RetiredSecretWhileRotating", providertest.SignLemonSqueezy(fixture, retired, "order_created"), fixture, nil},
		{"OtherSecret", providertest.SignLemonSqueezy(fixture, "someone_elses_secret_0123456789", "order_created"), fixture, provider.ErrSignature},
		{"AlteredByOneByte", providertest.SignLemonSqueezy(fixture, current, "order_created"), []byte(strings.Replace(string(fixture), `"total": 1199`, `"total": 1198`, 1)), provider.ErrSignature},
		{"Missing", http.Header{}, fixture, provider.ErrSignature},
		{"NotHex", http.Header{"X-Signature": {"zz"}}, fixture, provider.ErrSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev, err := l.Verify(tt.header, tt.body, time.Now())
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
			if err == nil && (ev.ID != "order_created:orders:1:2021-08-17T09:45:53.000000Z" || ev.PaymentID != "1") {
				t.Errorf("event = id %q payment %q", ev.ID, ev.PaymentID)
			}
		})
	}
}

// TestLemonSqueezyRules: a paid order_created fulfils the order; another
// status waits; another event never fulfils; a numeric order id is
// flagged; a later version of one object is another event; the other
// mode's events are refused.
func TestLemonSqueezyRules(t *testing.T) {
	t.Parallel()
	var fixture map[string]any
	loadTestdata(t, "lemonsqueezy/order_created.json", &fixture)
	const secret = "ls_signing_secret_rules_0123456789"
	variant := func(edit func(meta, data, attrs map[string]any)) []byte {
		var ev map[string]any
		b, _ := json.Marshal(fixture)
		_ = json.Unmarshal(b, &ev)
		data := ev["data"].(map[string]any)
		if edit != nil {
			edit(ev["meta"].(map[string]any), data, data["attributes"].(map[string]any))
		}
		out, _ := json.Marshal(ev)
		return out
	}
	tests := []struct {
		name    string
		mode    provider.Mode
		body    []byte
		id      string
		payment string
		note    string
		err     error
	}{
		{"PaidOrderFulfils", provider.ModeLive, variant(nil), "order_created:orders:1:2021-08-17T09:45:53.000000Z", "1", "", nil},
		{"PendingWaits", provider.ModeLive, variant(func(_, _, a map[string]any) { a["status"] = "pending" }), "", "", `status is "pending"`, nil},
		{"RefundNeverFulfils", provider.ModeLive, variant(func(m, _, a map[string]any) { m["event_name"] = "order_refunded"; a["status"] = "refunded" }), "order_refunded:orders:1:2021-08-17T09:45:53.000000Z", "", "", nil},
		{"LaterVersionIsAnotherEvent", provider.ModeLive, variant(func(_, _, a map[string]any) { a["updated_at"] = "2021-08-18T00:00:00.000000Z" }), "order_created:orders:1:2021-08-18T00:00:00.000000Z", "1", "", nil},
		{"NumericIDIsFlagged", provider.ModeLive, variant(func(_, d, _ map[string]any) { d["id"] = 1 }), "order_created:orders:1:2021-08-17T09:45:53.000000Z", "", "no string order id", nil},
		{"TestModeAtLive", provider.ModeLive, variant(func(m, _, _ map[string]any) { m["test_mode"] = true }), "", "", "", provider.ErrMode},
		{"LiveAtTest", provider.ModeTest, variant(nil), "", "", "", provider.ErrMode},
		{"NoEventName", provider.ModeLive, variant(func(m, _, _ map[string]any) { delete(m, "event_name") }), "", "", "", provider.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, err := provider.NewLemonSqueezy(provider.LemonSqueezyConfig{Secrets: []string{secret}, Mode: tt.mode})
			if err != nil {
				t.Fatal(err)
			}
			ev, err := l.Verify(providertest.SignLemonSqueezy(tt.body, secret, "order_created"), tt.body, time.Now())
			if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Fatalf("Verify = %v, want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			if (tt.id != "" && ev.ID != tt.id) || ev.PaymentID != tt.payment || !strings.Contains(ev.Note+ev.Unmapped, tt.note) {
				t.Errorf("event = id %q payment %q note %q unmapped %q, want id %q payment %q note ~%q", ev.ID, ev.PaymentID, ev.Note, ev.Unmapped, tt.id, tt.payment, tt.note)
			}
			if strings.HasSuffix(tt.name, "IsFlagged") != (ev.Unmapped != "") {
				t.Errorf("unmapped = %q: only a paid order without a readable id is flagged", ev.Unmapped)
			}
			m, err := l.Map(ev.Type, tt.body)
			if err != nil || m.PaymentID != ev.PaymentID || m.Unmapped != ev.Unmapped {
				t.Errorf("Map = %+v, %v; want the same reading as Verify", m, err)
			}
		})
	}
}

// TestLemonSqueezyReversals: order_refunded, whole or in part, names the
// order order_created named.
func TestLemonSqueezyReversals(t *testing.T) {
	t.Parallel()
	const secret = "ls_signing_secret_reversal_0123456789"
	l, err := provider.NewLemonSqueezy(provider.LemonSqueezyConfig{Secrets: []string{secret}})
	if err != nil {
		t.Fatal(err)
	}
	for status, want := range map[string]*provider.Reversal{
		"refunded":       {PaymentID: "1", Kind: provider.Refund, Full: true},
		"partial_refund": {PaymentID: "1", Kind: provider.Refund},
		"paid":           nil,
	} {
		body := []byte(`{"meta":{"test_mode":false,"event_name":"order_refunded"},"data":{"type":"orders","id":"1","attributes":{"status":"` + status + `","refunded":true,"updated_at":"2026-12-01T00:00:00.000000Z"}}}`)
		ev, err := l.Verify(providertest.SignLemonSqueezy(body, secret, "order_refunded"), body, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if (want == nil) != (ev.Reversal == nil) || (want != nil && *want != *ev.Reversal) || ev.Fulfils() {
			t.Errorf("status %s: reversal %+v, want %+v", status, ev.Reversal, want)
		}
	}
}

// TestLemonSqueezySubscriptionLife reads a subscription's life as Lemon
// Squeezy's documentation describes its events, signed as it signs:
// subscription_created links the subscription to its order; a
// cancellation keeps it active until it expires; past due and paused are
// no end; expired and unpaid end it; a payment event names an invoice,
// not the subscription, and is not read as one.
func TestLemonSqueezySubscriptionLife(t *testing.T) {
	t.Parallel()
	l, err := provider.NewLemonSqueezy(provider.LemonSqueezyConfig{Secrets: []string{providertest.LemonSqueezySecret}})
	require.NoError(t, err)
	read := func(name, typ, id, attrs string) provider.Event {
		t.Helper()
		body := providertest.LemonSqueezyEvent(name, typ, id, attrs)
		ev, err := l.Verify(providertest.SignLemonSqueezy(body, providertest.LemonSqueezySecret, name), body, time.Now())
		require.NoError(t, err)
		return ev
	}
	order := read("order_created", "orders", "1", `"status":"paid","total":999,"currency":"USD","first_order_item":{"product_id":2,"variant_id":3}`)
	require.Equal(t, "1", order.PaymentID)

	created := read("subscription_created", "subscriptions", "7", `"order_id":1,"status":"active","ends_at":null`)
	sub, pay := created.StartsSubscription()
	require.Equal(t, "7", sub)
	require.Equal(t, "1", pay, "the order the subscription started with, as order_created names it")
	require.False(t, created.Fulfils())

	cancelled := read("subscription_cancelled", "subscriptions", "7", `"order_id":1,"status":"cancelled"`)
	require.Nil(t, cancelled.Reversal, "active until its ends_at")
	require.NotEmpty(t, cancelled.Note)
	for _, tt := range []struct {
		name, status string
		want         *provider.Reversal
	}{
		{"subscription_updated", "past_due", &provider.Reversal{Kind: provider.Suspension, Subscription: "7", Standing: provider.PastDue}},
		{"subscription_paused", "paused", &provider.Reversal{Kind: provider.Suspension, Subscription: "7", Standing: provider.Paused}},
		{"subscription_unpaused", "active", nil},
		{"subscription_resumed", "active", nil},
		{"subscription_updated", "on_trial", nil},
	} {
		ev := read(tt.name, "subscriptions", "7", `"order_id":1,"status":"`+tt.status+`"`)
		require.Equal(t, tt.want, ev.Reversal, tt.name)
		require.Equal(t, tt.want == nil, ev.Resumes == "7", tt.name)
		require.Equal(t, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), ev.StandingAt.UTC(), "%s: the subscription's updated_at", tt.name)
	}
	for _, tt := range []struct{ name, status string }{
		{"subscription_expired", "expired"},
		{"subscription_updated", "expired"},
		{"subscription_updated", "unpaid"},
	} {
		ev := read(tt.name, "subscriptions", "7", `"order_id":1,"status":"`+tt.status+`"`)
		require.Equal(t, &provider.Reversal{Kind: provider.End, Subscription: "7"}, ev.Reversal, "%s %s", tt.name, tt.status)
	}
	failed := read("subscription_payment_failed", "subscription-invoices", "55", `"subscription_id":7,"status":"failed"`)
	require.Nil(t, failed.Reversal)
	sub, _ = failed.StartsSubscription()
	require.Empty(t, sub)
}

// TestLemonSqueezySubscriptionInvoices reads a subscription's invoices as
// Lemon Squeezy's event reference describes the subscription-invoices
// object (billing_reason initial or renewal; Lemon Squeezy publishes no
// signed sample), signed as it signs: each states its subscription and
// whether it is the first; a paid renewal is a purchase of its own where
// renewals fulfil, a recovered one the same; a refund names the invoice.
func TestLemonSqueezySubscriptionInvoices(t *testing.T) {
	t.Parallel()
	reader := func(renewals bool) func(name, attrs string) provider.Event {
		l, err := provider.NewLemonSqueezy(provider.LemonSqueezyConfig{Secrets: []string{providertest.LemonSqueezySecret}, FulfilRenewals: renewals})
		require.NoError(t, err)
		return func(name, attrs string) provider.Event {
			t.Helper()
			body := providertest.LemonSqueezyEvent(name, "subscription-invoices", "55", attrs)
			ev, err := l.Verify(providertest.SignLemonSqueezy(body, providertest.LemonSqueezySecret, name), body, time.Now())
			require.NoError(t, err)
			return ev
		}
	}
	on, off := reader(true), reader(false)
	initial := on("subscription_payment_success", `"subscription_id":7,"billing_reason":"initial","status":"paid","total":999,"currency":"USD"`)
	require.False(t, initial.Fulfils(), "the first invoice is the order's purchase")
	require.Equal(t, &provider.Invoice{ID: "55", Payment: "55", Subscription: "7", First: true}, initial.Invoice)

	renewal := `"subscription_id":7,"billing_reason":"renewal","status":"paid","total":999,"currency":"USD"`
	for _, name := range []string{"subscription_payment_success", "subscription_payment_recovered"} {
		ev := on(name, renewal)
		require.Equal(t, "55", ev.PaymentID, name)
		require.Equal(t, provider.Renewal, ev.Purchase.Kind, name)
		require.Equal(t, &provider.Money{Minor: 999, Currency: "USD"}, ev.Paid, name)
		require.Equal(t, &provider.Invoice{ID: "55", Payment: "55", Subscription: "7"}, ev.Invoice, name)
		require.False(t, off(name, renewal).Fulfils(), "%s: renewals fulfil only when configured", name)
	}
	require.False(t, on("subscription_payment_failed", `"subscription_id":7,"billing_reason":"renewal","status":"failed"`).Fulfils())

	refunded := on("subscription_payment_refunded", `"subscription_id":7,"billing_reason":"initial","status":"refunded"`)
	require.Equal(t, &provider.Reversal{PaymentID: "55", Kind: provider.Refund, Full: true}, refunded.Reversal)
	require.True(t, refunded.Invoice.First, "a refund of the first invoice: the order's, through the invoice")
	partly := on("subscription_payment_refunded", `"subscription_id":7,"billing_reason":"renewal","status":"partial_refund"`)
	require.Equal(t, &provider.Reversal{PaymentID: "55", Kind: provider.Refund}, partly.Reversal)
}
