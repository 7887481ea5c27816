package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
)

// What an attacker holding one genuine signed delivery can make of it,
// through the HTTP edge, each with the provider's own scheme (issue 31).

// TestAdyenReSplitBuysNothing: Adyen signs eight fields joined by ':'
// unescaped, so a genuine item whose merchantReference holds a colon
// verifies again with the colon moved between fields: a new
// pspReference, a new payment. The re-split item is refused and the
// receiver acts once.
func TestAdyenReSplitBuysNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	genuine := b.postAdyen(t, providertest.AdyenItem{EventCode: "AUTHORISATION", PSPReference: "8815329842815468",
		MerchantAccount: "ShopAccount", MerchantReference: "order:42", Value: 1999, Currency: "EUR", Success: true})

	// The forgery: the genuine signature over the fields split another way.
	var env map[string]any
	require.NoError(t, json.Unmarshal(genuine, &env))
	item := env["notificationItems"].([]any)[0].(map[string]any)["NotificationRequestItem"].(map[string]any)
	item["pspReference"], item["originalReference"] = "8815329842815468:", "ShopAccount"
	item["merchantAccountCode"], item["merchantReference"] = "order", "42"
	forged, err := json.Marshal(env)
	require.NoError(t, err)
	got := b.post(t, "/webhooks/adyen", http.Header{"Content-Type": {"application/json"}}, forged)
	require.Equal(t, http.StatusBadRequest, got.code, string(got.raw))
	require.Contains(t, string(got.raw), "colon")

	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE provider = 'adyen'`), "the re-split item stored nothing")
	require.Eventually(t, func() bool { return len(b.rec.Calls()) == 1 }, 15*time.Second, 10*time.Millisecond)
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE payment_id = '8815329842815468:'`))
}

// postAdyen sends a delivery of item, signed with the current key, and
// requires a 200; it returns the body sent.
func (b *testBundle) postAdyen(t *testing.T, item providertest.AdyenItem) []byte {
	t.Helper()
	body, err := providertest.SignAdyen([]providertest.AdyenItem{item}, adyenKey, false)
	require.NoError(t, err)
	got := b.post(t, "/webhooks/adyen", http.Header{"Content-Type": {"application/json"}}, body)
	require.Equal(t, http.StatusOK, got.code, string(got.raw))
	return body
}

// TestAdyenBodiesAreCappedSmall: Adyen's deliveries are a few KiB, so an
// unsigned body is refused at Adyen's own cap, below the deployment's, and
// nothing past it is read or parsed; Stripe's cap stays the deployment's.
func TestAdyenBodiesAreCappedSmall(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{maxBody: 1 << 20})
	big := []byte(`{"live":"false","notificationItems":[{"NotificationRequestItem":{"x":"` + strings.Repeat("a", 300<<10) + `"}}]}`)
	got := b.post(t, "/webhooks/adyen", http.Header{"Content-Type": {"application/json"}}, big)
	require.Equal(t, http.StatusRequestEntityTooLarge, got.code, string(got.raw))
	got = b.post(t, "/webhooks/stripe", http.Header{"Stripe-Signature": {"t=1,v1=00"}}, big)
	require.Equal(t, http.StatusBadRequest, got.code, "300 KiB is under the deployment's cap: %s", got.raw)
}

// TestZeroAmountAuthorisationPaysNothing: a zero-amount Adyen
// authorisation (a card saved) is stored and acknowledged, and fulfils
// nothing.
func TestZeroAmountAuthorisationPaysNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	b.postAdyen(t, providertest.AdyenItem{EventCode: "AUTHORISATION", PSPReference: "ZEROAUTH0000001",
		MerchantAccount: "Shop", MerchantReference: "card-on-file", Value: 0, Currency: "EUR", Success: true})
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE provider = 'adyen' AND payment_id IS NULL`))
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM fulfilment`))
}

// TestShopifyRelabelledTopicBuysNothing: Shopify signs the body, not the
// topic header. A won dispute's genuine body resent under refunds/create
// with a made-up event id is refused, and the paid order is not taken
// back.
func TestShopifyRelabelledTopicBuysNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	order := providertest.ShopifyOrder("orders/paid", "7001", "paid")
	got := b.post(t, "/webhooks/shopify", providertest.SignShopify(order, shopifySecret, "orders/paid", "evt-paid-7001"), order)
	require.Equal(t, http.StatusOK, got.code, string(got.raw))
	require.Eventually(t, func() bool { return len(b.rec.Calls()) == 1 }, 15*time.Second, 10*time.Millisecond)

	won := []byte(`{"id":598735659,"order_id":7001,"type":"chargeback","amount":"11.50","currency":"USD","reason":"fraudulent","status":"won","evidence_due_by":"2026-12-20T00:00:00Z"}`)
	got = b.post(t, "/webhooks/shopify", providertest.SignShopify(won, shopifySecret, "disputes/update", "evt-won-7001"), won)
	require.Equal(t, http.StatusOK, got.code, "the genuine delivery is taken: %s", got.raw)
	for i, topic := range []string{"refunds/create", "orders/updated", "orders/paid"} {
		got = b.post(t, "/webhooks/shopify", providertest.SignShopify(won, shopifySecret, topic, fmt.Sprintf("made-up-%d", i)), won)
		require.Equal(t, http.StatusBadRequest, got.code, "%s: %s", topic, got.raw)
	}
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id LIKE 'made-up-%'`))
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE reverses IS NOT NULL`))
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE action = 'revoke'`), "nothing is taken back")
}

// TestForeignShopIsRefused: with GUARDIAN_SHOPIFY_SHOPS set, a delivery
// signed with the app's shared secret for another shop is refused,
// whether its unsigned X-Shopify-Shop-Domain says so or lies.
func TestForeignShopIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{shopifyShops: []string{"ours.myshopify.com"}})
	order := func(shop, id string) []byte {
		var o map[string]any
		require.NoError(t, json.Unmarshal(providertest.ShopifyOrder("orders/paid", id, "paid"), &o))
		o["order_status_url"] = "https://" + shop + "/548380009/orders/b1946ac92492d2347c6235b4d2611184/authenticate?key=k"
		out, err := json.Marshal(o)
		require.NoError(t, err)
		return out
	}
	send := func(body []byte, headerShop, id string) answer {
		h := providertest.SignShopify(body, shopifySecret, "orders/paid", id)
		h.Set("X-Shopify-Shop-Domain", headerShop)
		return b.post(t, "/webhooks/shopify", h, body)
	}
	require.Equal(t, http.StatusOK, send(order("ours.myshopify.com", "8001"), "ours.myshopify.com", "evt-ours").code)
	got := send(order("theirs.myshopify.com", "8002"), "theirs.myshopify.com", "evt-theirs")
	require.Equal(t, http.StatusBadRequest, got.code, string(got.raw))
	got = send(order("theirs.myshopify.com", "8003"), "ours.myshopify.com", "evt-lying")
	require.Equal(t, http.StatusBadRequest, got.code, "an unsigned header naming our shop proves nothing: %s", got.raw)
	require.True(t, strings.Contains(string(got.raw), "does not serve"), string(got.raw))
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE provider = 'shopify'`))
	require.Eventually(t, func() bool {
		return b.db.Count(t, `SELECT count(*) FROM refused_delivery WHERE provider = 'shopify' AND reason = 'foreign'`) == 2
	}, 10*time.Second, 10*time.Millisecond)
}

// TestModeRefusalsAreRecordedWithTheirNeighbours: a well-signed event of
// the other mode (a test event at a live deployment), refused at the same
// moment as forged ones, is listed with every one of them: before
// migration 00031 its row broke the batch that held them all.
func TestModeRefusalsAreRecordedWithTheirNeighbours(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{stripeMode: provider.ModeLive})
	testEvent := []byte(`{"id":"evt_test_mode","object":"event","type":"checkout.session.completed","livemode":false,"data":{"object":{"id":"cs_1","payment_status":"paid","payment_intent":"pi_test_mode"}}}`)
	done := make(chan answer, 6)
	for i := range 5 {
		go func() {
			done <- b.post(t, "/webhooks/stripe", http.Header{"Stripe-Signature": {fmt.Sprintf("t=%d,v1=%064d", time.Now().Unix(), i)}}, []byte(`{}`))
		}()
	}
	go func() {
		done <- b.post(t, "/webhooks/stripe", providertest.SignStripe(testEvent, stripeSecret, time.Now()), testEvent)
	}()
	for range 6 {
		require.Equal(t, http.StatusBadRequest, (<-done).code)
	}
	require.Eventually(t, func() bool {
		return b.db.Count(t, `SELECT count(*) FROM refused_delivery WHERE reason = 'signature'`) == 5 &&
			b.db.Count(t, `SELECT count(*) FROM refused_delivery WHERE reason = 'mode'`) == 1
	}, 10*time.Second, 10*time.Millisecond)
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM webhook_event`))
}

// TestRefusedFloodIsLimitedPerAddress: an address sending forgeries is
// answered 429 once its refusal budget is spent, and its refusals stop
// reaching the record; a well-signed delivery from the same address is
// taken all the same, and another address keeps its own budget.
func TestRefusedFloodIsLimitedPerAddress(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{trustedProxies: []string{"127.0.0.1/32"}})
	from := func(addr string, h http.Header) http.Header {
		h = h.Clone()
		h.Set("X-Forwarded-For", addr)
		return h
	}
	forged := http.Header{"Stripe-Signature": {fmt.Sprintf("t=%d,v1=%064d", time.Now().Unix(), 0)}}
	codes := map[int]int{}
	for range 300 {
		codes[b.post(t, "/webhooks/stripe", from("203.0.113.7", forged), []byte(`{}`)).code]++
	}
	require.Positive(t, codes[http.StatusTooManyRequests], "a flood of forgeries is limited: %v", codes)
	require.LessOrEqual(t, codes[http.StatusBadRequest], 150, "%v", codes)

	body := intentEvent("evt_flooded", "pi_flooded")
	got := b.post(t, "/webhooks/stripe", from("203.0.113.7", providertest.SignStripe([]byte(body), stripeSecret, time.Now())), []byte(body))
	require.Equal(t, http.StatusOK, got.code, "a well-signed delivery is never limited: %s", got.raw)
	require.Equal(t, http.StatusBadRequest, b.post(t, "/webhooks/stripe", from("198.51.100.8", forged), []byte(`{}`)).code, "another address has its own budget")
	require.Eventually(t, func() bool {
		return b.db.Count(t, `SELECT count(*) FROM refused_delivery`) == codes[http.StatusBadRequest]+1
	}, 10*time.Second, 10*time.Millisecond)
}

// payPalForgery is a genuine PayPal delivery of an approved order, and a
// body of the attacker's choice (a completed capture never paid) padded
// to the genuine body's CRC32, which is all PayPal's signature binds of
// a body.
func payPalForgery(t *testing.T) (genuine, forged []byte, h http.Header) {
	t.Helper()
	genuine = []byte(`{"id":"WH-APPROVED-1","event_type":"CHECKOUT.ORDER.APPROVED","resource":{"id":"5O190127TN364715T","status":"APPROVED"}}`)
	forged, err := providertest.PadCRC32([]byte(`{"id":"WH-FORGED-1","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"id":"CAPNEVERPAID","status":"COMPLETED",`+
		`"amount":{"currency_code":"USD","value":"500.00"}},"x":"`), []byte(`"}`), crc32.ChecksumIEEE(genuine))
	require.NoError(t, err)
	require.Equal(t, crc32.ChecksumIEEE(genuine), crc32.ChecksumIEEE(forged))
	h, err = providertest.SignPayPal(genuine, payPalKey(), payPalCertURL, payPalWebhook, "tx-captured", time.Now())
	require.NoError(t, err)
	return genuine, forged, h
}

// TestPayPalCRC32ForgeryBuysNothing: the forged body verifies under the
// genuine delivery's signature (the attack is real), and buys nothing.
// Without API credentials, the transmission is bound to the body first
// seen under it, so the forgery sent after the genuine delivery is refused
// (rebound). With them, PayPal's own copy of the event decides, so the
// forgery is refused even sent first, and the genuine delivery still
// stands.
func TestPayPalCRC32ForgeryBuysNothing(t *testing.T) {
	t.Parallel()
	noCapture := func(t *testing.T, b *testBundle) {
		require.Zero(t, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE provider = 'paypal' AND event_id = 'WH-FORGED-1'`))
		require.Zero(t, b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE payment_id = 'CAPNEVERPAID'`))
	}

	t.Run("BoundToItsTransmission", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		genuine, forged, h := payPalForgery(t)
		p, err := provider.NewPayPal(provider.PayPalConfig{WebhookIDs: []string{payPalWebhook}, Fetch: providertest.PayPalFetch})
		require.NoError(t, err)
		ev, err := p.Verify(h, forged, time.Now())
		require.NoError(t, err, "the forgery verifies: PayPal's signature binds only the CRC32")
		require.Equal(t, "CAPNEVERPAID", ev.PaymentID)

		got := b.post(t, "/webhooks/paypal", h, genuine)
		require.Equal(t, http.StatusOK, got.code, string(got.raw))
		got = b.post(t, "/webhooks/paypal", h, forged)
		require.Equal(t, http.StatusBadRequest, got.code, string(got.raw))
		require.Contains(t, string(got.raw), "transmission")
		got = b.post(t, "/webhooks/paypal", h, genuine)
		require.Equal(t, http.StatusOK, got.code, "PayPal's retry of the genuine body passes: %s", got.raw)
		noCapture(t, b)
		require.Eventually(t, func() bool {
			return b.db.Count(t, `SELECT count(*) FROM refused_delivery WHERE reason = 'rebound'`) == 1
		}, 10*time.Second, 10*time.Millisecond)
	})

	t.Run("ConfirmedWithPayPal", func(t *testing.T) {
		t.Parallel()
		genuine, forged, h := payPalForgery(t)
		var asked atomic.Int32
		b := setup(t, setupOpts{payPalEvent: func(_ context.Context, id string) ([]byte, error) {
			asked.Add(1)
			if id == "WH-APPROVED-1" {
				return genuine, nil
			}
			return nil, fmt.Errorf("paypal answered 404: the event %s does not exist", id)
		}})
		got := b.post(t, "/webhooks/paypal", h, forged)
		require.Equal(t, http.StatusBadRequest, got.code, "sent before the genuine delivery: %s", got.raw)
		require.EqualValues(t, 1, asked.Load())
		noCapture(t, b)
		got = b.post(t, "/webhooks/paypal", h, genuine)
		require.Equal(t, http.StatusOK, got.code, string(got.raw))
		require.EqualValues(t, 1, asked.Load(), "an event that decides nothing is not confirmed")
	})
}
