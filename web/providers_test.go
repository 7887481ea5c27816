package web_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/web"
)

// conformant is one provider as the conformance suite drives it: how it
// signs, and its bodies for one purchase.
type conformant struct {
	name string
	// sign signs body at a time, with the provider's current secret, or
	// the one being rotated out when old.
	sign func(t *testing.T, id string, body []byte, at time.Time, old bool) http.Header
	// paid is the event that pays for purchase; other is another event of
	// the same purchase that must not fulfil it again; unpaid is an event
	// of a fulfilling type that does not pay; reversed is an event that
	// takes the purchase back under the default policy (a full refund or a
	// dispute lost).
	paid, other, unpaid, reversed func(purchase string) (id string, body []byte)
	// unsignedTime says the scheme signs no time (Shopify): no delivery is
	// stale, and a replay is stopped by the event's identity instead.
	unsignedTime bool
	// delivery is the delivery id stored beside the event's, where the
	// provider sends one (Shopify); nil where it sends none.
	delivery func(id string) string
	// seal signs the body itself, where the signature travels inside it
	// (Adyen): sign is unused then. alter changes one byte of what the
	// signature covers, where not all of the body is (Adyen's items sign
	// eight fields); nil alters a byte in the middle.
	seal  func(t *testing.T, body []byte, old bool) []byte
	alter func(body []byte) []byte
}

// request returns what the provider sends for body: its headers, and the
// body as sent.
func (c conformant) request(t *testing.T, id string, body []byte, at time.Time, old bool) (http.Header, []byte) {
	if c.seal != nil {
		return http.Header{"Content-Type": {"application/json"}}, c.seal(t, body, old)
	}
	return c.sign(t, id, body, at, old), body
}

// post sends body to path as the provider would.
func (c conformant) post(t *testing.T, b *testBundle, path, id string, body []byte, at time.Time, old bool) answer {
	h, sent := c.request(t, id, body, at, old)
	return b.post(t, path, h, sent)
}

// rotates says whether the suite can sign with a secret being rotated out.
func (c conformant) rotates(t *testing.T) bool {
	return c.seal != nil || c.sign(t, "rot", []byte(`{}`), time.Now(), true) != nil
}

var conformants = []conformant{
	{
		name: "stripe",
		sign: func(t *testing.T, _ string, body []byte, at time.Time, old bool) http.Header {
			if old {
				return nil // Stripe's secrets rotate in the endpoint; tested in app/provider
			}
			return providertest.SignStripe(body, stripeSecret, at)
		},
		paid: func(p string) (string, []byte) {
			return "evt_cs_" + p, []byte(intentEvent("evt_cs_"+p, "pi_"+p))
		},
		other: func(p string) (string, []byte) {
			return "evt_async_" + p, []byte(checkoutEvent("evt_async_"+p, "pi_"+p))
		},
		unpaid: func(p string) (string, []byte) {
			id := "evt_unpaid_" + p
			return id, []byte(fmt.Sprintf(`{"id":%q,"object":"event","type":"checkout.session.completed","data":{"object":{"id":"cs_u_%s","object":"checkout.session","mode":"payment","payment_status":"unpaid","payment_intent":"pi_u_%s"}}}`, id, p, p))
		},
		reversed: func(p string) (string, []byte) {
			id := "evt_refunded_" + p
			return id, []byte(fmt.Sprintf(`{"id":%q,"object":"event","type":"charge.refunded","data":{"object":{"id":"ch_%s","object":"charge","payment_intent":"pi_%s","refunded":true}}}`, id, p, p))
		},
	},
	{
		name: "standard",
		sign: func(t *testing.T, id string, body []byte, at time.Time, old bool) http.Header {
			if old {
				return nil
			}
			h, err := providertest.SignStandard(id, body, standardSecret, at)
			require.NoError(t, err)
			return h
		},
		paid: func(p string) (string, []byte) {
			return "msg_paid_" + p, []byte(fmt.Sprintf(`{"type":"payment.succeeded","data":{"payment_id":"pay_%s"}}`, p))
		},
		other: func(p string) (string, []byte) {
			return "msg_again_" + p, []byte(fmt.Sprintf(`{"type":"payment.succeeded","data":{"payment_id":"pay_%s","note":"a second message"}}`, p))
		},
		unpaid: func(p string) (string, []byte) {
			return "msg_unpaid_" + p, []byte(`{"type":"payment.succeeded","data":{"amount":100}}`)
		},
		reversed: func(p string) (string, []byte) {
			return "msg_refunded_" + p, []byte(fmt.Sprintf(`{"type":"payment.refunded","data":{"payment_id":"pay_%s"}}`, p))
		},
	},
	{
		name: "paddle",
		sign: func(t *testing.T, _ string, body []byte, at time.Time, old bool) http.Header {
			secret := paddleSecret
			if old {
				secret = paddleOldSecret
			}
			return providertest.SignPaddle(body, secret, at)
		},
		paid: func(p string) (string, []byte) {
			return "evt_completed_" + p, paddleEvent("evt_completed_"+p, "transaction.completed", "txn_"+p, "completed")
		},
		other: func(p string) (string, []byte) {
			return "evt_paid_" + p, paddleEvent("evt_paid_"+p, "transaction.paid", "txn_"+p, "paid")
		},
		unpaid: func(p string) (string, []byte) {
			return "evt_pastdue_" + p, paddleEvent("evt_pastdue_"+p, "transaction.completed", "txn_u_"+p, "past_due")
		},
		reversed: func(p string) (string, []byte) {
			id := "evt_chargeback_" + p
			return id, []byte(fmt.Sprintf(`{"event_id":%q,"event_type":"adjustment.created","occurred_at":"2026-12-01T00:00:00Z","data":{"id":"adj_%s","action":"chargeback","status":"approved","transaction_id":"txn_%s"}}`, id, p, p))
		},
	},
	{
		name:         "shopify",
		unsignedTime: true,
		delivery:     func(id string) string { return "whd_" + id },
		sign: func(t *testing.T, id string, body []byte, _ time.Time, old bool) http.Header {
			secret := shopifySecret
			if old {
				secret = shopifyOldSecret
			}
			var topic struct{ Topic string }
			require.NoError(t, json.Unmarshal(body, &topic))
			return providertest.SignShopify(body, secret, topic.Topic, id)
		},
		// The topic rides in a header; these bodies carry it too, for sign.
		paid: func(p string) (string, []byte) {
			return "evt-paid-" + p, shopifyOrder("orders/paid", p, "paid")
		},
		other: func(p string) (string, []byte) {
			return "evt-create-" + p, shopifyOrder("orders/create", p, "paid")
		},
		unpaid: func(p string) (string, []byte) {
			return "evt-pending-" + p, shopifyOrder("orders/paid", "9"+p, "pending")
		},
		reversed: func(p string) (string, []byte) {
			return "evt-refunded-" + p, shopifyOrder("orders/updated", p, "refunded")
		},
	},
	{
		name:         "lemonsqueezy",
		unsignedTime: true,
		sign: func(t *testing.T, _ string, body []byte, _ time.Time, old bool) http.Header {
			secret := lemonSecret
			if old {
				secret = lemonOldSecret
			}
			var ev struct {
				Meta struct {
					EventName string `json:"event_name"`
				}
			}
			require.NoError(t, json.Unmarshal(body, &ev))
			return providertest.SignLemonSqueezy(body, secret, ev.Meta.EventName)
		},
		// Lemon Squeezy's event ids are made from the event's name and object.
		paid: func(p string) (string, []byte) {
			return "order_created:orders:" + p + ":2026-12-01T00:00:00.000000Z", lemonEvent("order_created", "orders", p, `"status":"paid"`)
		},
		other: func(p string) (string, []byte) {
			return "subscription_created:subscriptions:s" + p + ":2026-12-01T00:00:00.000000Z", lemonEvent("subscription_created", "subscriptions", "s"+p, `"status":"active","order_id":1`)
		},
		unpaid: func(p string) (string, []byte) {
			return "order_created:orders:u" + p + ":2026-12-01T00:00:00.000000Z", lemonEvent("order_created", "orders", "u"+p, `"status":"pending"`)
		},
		reversed: func(p string) (string, []byte) {
			return "order_refunded:orders:" + p + ":2026-12-01T00:00:00.000000Z", lemonEvent("order_refunded", "orders", p, `"status":"refunded"`)
		},
	},
	{
		name:         "adyen",
		unsignedTime: true,
		seal: func(t *testing.T, body []byte, old bool) []byte {
			key := adyenKey
			if old {
				key = adyenOldKey
			}
			sealed, err := providertest.ResignAdyen(body, key)
			require.NoError(t, err)
			return sealed
		},
		alter: func(body []byte) []byte {
			return []byte(strings.Replace(string(body), `"value":1999`, `"value":1998`, 1))
		},
		paid: func(p string) (string, []byte) {
			return "AUTHORISATION:PSP_" + p + ":true", adyenItem("AUTHORISATION", "PSP_"+p, "", true)
		},
		// Under automatic capture the payment's CAPTURE fulfils nothing more.
		other: func(p string) (string, []byte) {
			return "CAPTURE:CAP_" + p + ":true", adyenItem("CAPTURE", "CAP_"+p, "PSP_"+p, true)
		},
		unpaid: func(p string) (string, []byte) {
			return "AUTHORISATION:PSP_U_" + p + ":false", adyenItem("AUTHORISATION", "PSP_U_"+p, "", false)
		},
		reversed: func(p string) (string, []byte) {
			return "CHARGEBACK:CB_" + p + ":true", adyenItem("CHARGEBACK", "CB_"+p, "PSP_"+p, true)
		},
	},
	{
		name: "paypal",
		sign: func(t *testing.T, id string, body []byte, at time.Time, old bool) http.Header {
			webhook := payPalWebhook
			if old {
				webhook = payPalOldWebhook
			}
			h, err := providertest.SignPayPal(body, payPalCert.key, payPalCertURL, webhook, "tx-"+id+"-"+at.Format("150405.000"), at)
			require.NoError(t, err)
			return h
		},
		paid: func(p string) (string, []byte) {
			return "WH-PAID-" + p, payPalEvent("WH-PAID-"+p, "PAYMENT.CAPTURE.COMPLETED", "CAP"+p, "COMPLETED")
		},
		// The order's approval comes first and never pays.
		other: func(p string) (string, []byte) {
			return "WH-APPROVED-" + p, payPalEvent("WH-APPROVED-"+p, "CHECKOUT.ORDER.APPROVED", "ORDER"+p, "APPROVED")
		},
		unpaid: func(p string) (string, []byte) {
			return "WH-PENDING-" + p, payPalEvent("WH-PENDING-"+p, "PAYMENT.CAPTURE.COMPLETED", "CAPU"+p, "PENDING")
		},
		reversed: func(p string) (string, []byte) {
			id := "WH-DISPUTE-LOST-" + p
			return id, []byte(fmt.Sprintf(`{"id":%q,"event_type":"CUSTOMER.DISPUTE.RESOLVED","resource_type":"dispute","resource":{"dispute_id":"PP-D-%s","disputed_transactions":[{"seller_transaction_id":"CAP%s"}],"dispute_outcome":{"outcome_code":"RESOLVED_BUYER_FAVOUR"}}}`, id, p, p))
		},
	},
}

// payPalEvent is a PayPal webhook event about resource id.
func payPalEvent(id, typ, resource, status string) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"event_version":"1.0","create_time":"2026-12-01T00:00:00.000Z","resource_type":"capture","event_type":%q,"summary":"a test's","resource":{"id":%q,"status":%q,"amount":{"currency_code":"USD","value":"19.99"}}}`, id, typ, resource, status))
}

// adyenItem is an Adyen delivery of one notification item, unsigned.
func adyenItem(code, psp, original string, success bool) []byte {
	return []byte(fmt.Sprintf(`{"live":"false","notificationItems":[{"NotificationRequestItem":{"additionalData":{},"amount":{"currency":"EUR","value":1999},"eventCode":%q,"eventDate":"2026-12-01T00:00:00+01:00","merchantAccountCode":"Shop","merchantReference":"order-1","originalReference":%q,"paymentMethod":"visa","pspReference":%q,"reason":"","success":"%t"}}]}`, code, original, psp, success))
}

// lemonEvent is a Lemon Squeezy webhook body: a JSON:API object under meta.
func lemonEvent(name, typ, id, attrs string) []byte {
	return []byte(fmt.Sprintf(`{"meta":{"test_mode":false,"event_name":%q},"data":{"type":%q,"id":%q,"attributes":{%s,"updated_at":"2026-12-01T00:00:00.000000Z"}}}`, name, typ, id, attrs))
}

// shopifyOrder is an order as Shopify's webhooks carry it, its id made of
// the purchase's digits.
func shopifyOrder(topic, purchase, status string) []byte {
	digits := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, purchase)
	return []byte(fmt.Sprintf(`{"topic":%q,"id":45078%s,"financial_status":%q,"test":false,"currency":"USD","total_price":"409.94"}`, topic, digits, status))
}

func paddleEvent(id, typ, txn, status string) []byte {
	return []byte(fmt.Sprintf(`{"event_id":%q,"event_type":%q,"occurred_at":"2026-12-01T00:00:00Z","notification_id":"ntf_%s","data":{"id":%q,"status":%q,"origin":"web","customer_id":"ctm_1","currency_code":"USD"}}`, id, typ, id, txn, status))
}

// TestProviderConformance runs every provider through the same cases, at
// the HTTP edge with the real domain behind it: the paid event delivered
// many times at once is stored once and fulfils once; the purchase's other
// event and an unpaid one fulfil nothing more; a bad, stale or future
// signature, and a body altered by one byte, are refused and change
// nothing; a secret being rotated out still verifies.
func TestProviderConformance(t *testing.T) {
	t.Parallel()
	for _, c := range conformants {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{})
			path := "/webhooks/" + c.name
			now := time.Now()
			count := func(q string, args ...any) int { return b.db.Count(t, q, args...) }

			id, body := c.paid("p1")
			h, sent := c.request(t, id, body, now, false)
			var wg sync.WaitGroup
			codes := make([]int, 8)
			for i := range codes {
				wg.Go(func() { codes[i] = b.post(t, path, h, sent).code })
			}
			wg.Wait()
			for _, code := range codes {
				require.Equal(t, http.StatusOK, code)
			}
			require.Equal(t, 1, count(`SELECT count(*) FROM webhook_event WHERE provider = $1 AND event_id = $2`, c.name, id))
			var delivery *string
			require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT delivery_id FROM webhook_event WHERE provider = $1 AND event_id = $2`, c.name, id).Scan(&delivery))
			if c.delivery != nil {
				require.NotNil(t, delivery)
				require.Equal(t, c.delivery(id), *delivery, "the delivery's own id is stored beside the event's")
				code, raw := b.api(t, "GET", "/api/v1/events/"+c.name+"/"+id, b.token, nil)
				require.Equal(t, http.StatusOK, code)
				var got web.EventDetail
				require.NoError(t, json.Unmarshal(raw, &got))
				require.Equal(t, c.delivery(id), got.Event.DeliveryID, "and answered by the API")
			} else {
				require.Nil(t, delivery)
			}
			require.Eventually(t, func() bool {
				return count(`SELECT count(*) FROM fulfilment WHERE provider = $1 AND state = 'fulfilled'`, c.name) == 1
			}, 15*time.Second, 10*time.Millisecond)

			otherID, other := c.other("p1")
			require.Equal(t, http.StatusOK, c.post(t, b, path, otherID, other, now, false).code)
			unpaidID, unpaid := c.unpaid("p1")
			require.Equal(t, http.StatusOK, c.post(t, b, path, unpaidID, unpaid, now, false).code, "every well-signed event gets a 2xx")
			require.Equal(t, 3, count(`SELECT count(*) FROM webhook_event WHERE provider = $1`, c.name))
			require.Equal(t, 1, count(`SELECT count(*) FROM fulfilment WHERE provider = $1`, c.name), "one fulfilment for the purchase, none for the unpaid")
			fs, err := db.FulfilmentsByPayment(b.ctx, b.db.Pool, c.name, paymentOf(t, b, c.name))
			require.NoError(t, err)
			require.Len(t, fs, 1)
			require.Equal(t, 1, b.rec.CallsForPayment(fs[0].PaymentID), "the receiver saw the purchase once")

			type refusal struct {
				name   string
				header http.Header
				body   []byte
			}
			alter := altered
			if c.alter != nil {
				alter = c.alter
			}
			require.NotEqual(t, sent, alter(sent))
			refused := []refusal{
				{"Unsigned", http.Header{}, body},
				{"AlteredByOneByte", h, alter(sent)},
			}
			if c.unsignedTime {
				// Nothing is stale: a delivery replayed an hour on is the
				// event already stored, and fulfils nothing more.
				require.Equal(t, http.StatusOK, c.post(t, b, path, id, body, now.Add(-time.Hour), false).code)
				require.Equal(t, 1, count(`SELECT count(*) FROM fulfilment WHERE provider = $1`, c.name))
			} else {
				refused = append(refused,
					refusal{"Stale", c.sign(t, id, body, now.Add(-time.Hour), false), body},
					refusal{"FromTheFuture", c.sign(t, id, body, now.Add(time.Hour), false), body})
			}
			for _, r := range refused {
				require.Equal(t, http.StatusBadRequest, b.post(t, path, r.header, r.body).code, r.name)
			}
			require.Equal(t, 3, count(`SELECT count(*) FROM webhook_event WHERE provider = $1`, c.name), "refused requests change nothing")

			// Taken back: the purchase's reversal, delivered twice at once,
			// revokes it once, under a key of its own.
			rid, reversal := c.reversed("p1")
			var rw sync.WaitGroup
			for range 2 {
				rw.Go(func() { require.Equal(t, http.StatusOK, c.post(t, b, path, rid, reversal, now, false).code) })
			}
			rw.Wait()
			require.Eventually(t, func() bool {
				return count(`SELECT count(*) FROM fulfilment WHERE provider = $1 AND action = 'revoke' AND state = 'fulfilled'`, c.name) == 1
			}, 15*time.Second, 10*time.Millisecond, "the payment is taken back")
			require.Equal(t, 2, b.rec.CallsForPayment(fs[0].PaymentID), "one fulfilment and one revocation reached the receiver")
			calls := b.rec.Calls()
			require.Equal(t, state.Revoke, calls[len(calls)-1].Action)
			require.Equal(t, 1, count(`SELECT count(*) FROM fulfilment WHERE provider = $1 AND action = 'revoke'`, c.name))

			if c.rotates(t) {
				rid, rbody := c.paid("p2")
				require.Equal(t, http.StatusOK, c.post(t, b, path, rid, rbody, now, true).code, "a secret being rotated out still verifies")
			}
		})
	}
}

// paymentOf reads the one fulfilled payment of provider.
func paymentOf(t *testing.T, b *testBundle, name string) string {
	t.Helper()
	var p string
	require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT payment_id FROM fulfilment WHERE provider = $1`, name).Scan(&p))
	return p
}

// altered changes one byte in the middle of body, keeping it JSON.
func altered(body []byte) []byte {
	out := append([]byte(nil), body...)
	for i := len(out) / 2; i < len(out); i++ {
		if out[i] >= 'a' && out[i] <= 'y' {
			out[i]++
			return out
		}
	}
	return out
}

// TestABatchDeliveryIsEachOfItsEvents: Adyen's notificationItems are events
// of their own: each stored and fulfilled once, a duplicate among them
// answered as one, and one badly signed item refuses the whole delivery,
// storing none of it.
func TestABatchDeliveryIsEachOfItsEvents(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	count := func(q string, args ...any) int { return b.db.Count(t, q, args...) }
	items := func(psps ...string) []providertest.AdyenItem {
		var out []providertest.AdyenItem
		for _, p := range psps {
			out = append(out, providertest.AdyenItem{EventCode: "AUTHORISATION", PSPReference: p, MerchantAccount: "Shop", Value: 500, Currency: "EUR", Success: true})
		}
		return out
	}
	header := http.Header{"Content-Type": {"application/json"}}

	one, err := providertest.SignAdyen(items("PSP_A"), adyenKey, false)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, b.post(t, "/webhooks/adyen", header, one).code)

	three, err := providertest.SignAdyen(items("PSP_A", "PSP_B", "PSP_C"), adyenKey, false)
	require.NoError(t, err)
	a := b.post(t, "/webhooks/adyen", header, three)
	require.Equal(t, http.StatusOK, a.code)
	var got struct {
		Events []struct {
			Status  string `json:"status"`
			EventID string `json:"event_id"`
		} `json:"events"`
	}
	require.NoError(t, json.Unmarshal(a.raw, &got))
	require.Len(t, got.Events, 3)
	require.Equal(t, "duplicate", got.Events[0].Status)
	require.Equal(t, "AUTHORISATION:PSP_B:true", got.Events[1].EventID)
	require.Equal(t, "accepted", got.Events[1].Status)
	require.Equal(t, 3, count(`SELECT count(*) FROM webhook_event WHERE provider = 'adyen'`))
	require.Eventually(t, func() bool {
		return count(`SELECT count(*) FROM fulfilment WHERE provider = 'adyen' AND state = 'fulfilled'`) == 3
	}, 15*time.Second, 10*time.Millisecond)
	for _, p := range []string{"PSP_A", "PSP_B", "PSP_C"} {
		require.Equal(t, 1, b.rec.CallsForPayment(p), p)
	}
	var stored string
	require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT convert_from(body, 'UTF8') FROM webhook_event WHERE event_id = 'AUTHORISATION:PSP_B:true'`).Scan(&stored))
	require.Contains(t, stored, `"pspReference":"PSP_B"`, "each event stores its own item, as sent")
	require.True(t, strings.HasPrefix(stored, "{") && !strings.Contains(stored, "notificationItems"), stored)
	require.NotContains(t, stored, "PSP_C")

	four, err := providertest.SignAdyen(items("PSP_D", "PSP_E"), adyenKey, false)
	require.NoError(t, err)
	forged := []byte(strings.Replace(string(four), `"pspReference":"PSP_E"`, `"pspReference":"PSP_F"`, 1))
	require.NotEqual(t, four, forged)
	require.Equal(t, http.StatusBadRequest, b.post(t, "/webhooks/adyen", header, forged).code)
	require.Equal(t, 3, count(`SELECT count(*) FROM webhook_event WHERE provider = 'adyen'`), "no item of a refused delivery is stored")
}

// TestPayPalCertificateHostDownIs503: a delivery that cannot be verified
// now, through no fault of the sender's, is answered 503 so PayPal
// retries; nothing is stored and nothing is counted as refused.
func TestPayPalCertificateHostDownIs503(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	body := payPalEvent("WH-DOWN-1", "PAYMENT.CAPTURE.COMPLETED", "CAPDOWN1", "COMPLETED")
	h, err := providertest.SignPayPal(body, payPalCert.key, payPalCertDownURL, payPalWebhook, "tx-down", time.Now())
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, b.post(t, "/webhooks/paypal", h, body).code)
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM webhook_event`))
	// Refusals are written behind the answer, in order: a real refusal
	// after the 503 shows, once written, whether the 503 was written too.
	require.Equal(t, http.StatusBadRequest, b.post(t, "/webhooks/paypal", http.Header{}, body).code)
	require.Eventually(t, func() bool { return b.db.Count(t, `SELECT count(*) FROM refused_delivery`) > 0 }, 5*time.Second, 20*time.Millisecond)
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM refused_delivery`), "the 503 is no refusal")
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM refused_delivery WHERE reason = 'signature'`))
	h, err = providertest.SignPayPal(body, payPalCert.key, payPalCertURL, payPalWebhook, "tx-up", time.Now())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, b.post(t, "/webhooks/paypal", h, body).code, "the retry, once PayPal answers")
}
