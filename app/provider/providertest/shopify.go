package providertest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// SignShopify makes the headers Shopify sends with an orders/paid or other
// topic's body, signed as Shopify signs, for tests and the demo: eventID is
// X-Shopify-Event-Id, and the delivery's X-Shopify-Webhook-Id is derived
// from it.
func SignShopify(body []byte, secret, topic, eventID string) http.Header {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Shopify-Hmac-Sha256", base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	h.Set("X-Shopify-Topic", topic)
	h.Set("X-Shopify-Event-Id", eventID)
	h.Set("X-Shopify-Webhook-Id", "whd_"+eventID)
	return h
}

// The Shopify sample's signing secrets: the current one, and one being
// rotated out.
const (
	ShopifySecret    = "shopify_client_secret_for_guardian_tests_0001"
	ShopifyOldSecret = "shopify_client_secret_for_guardian_tests_0000"
)

// ShopifyOrder is an order as Shopify's webhooks carry it, its id made of
// the purchase's digits; the topic rides in the body too, for the sample's
// signer (Shopify sends it in a header).
func ShopifyOrder(topic, purchase, status string) []byte {
	digits := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, purchase)
	return fmt.Appendf(nil, `{"topic":%q,"id":45078%s,"financial_status":%q,"test":false,"currency":"USD","total_price":"409.94"}`, topic, digits, status)
}

func init() {
	RegisterSample(Sample{
		Name:         "shopify",
		Settings:     map[string]string{"GUARDIAN_SHOPIFY_SECRETS": ShopifySecret + "," + ShopifyOldSecret},
		UnsignedTime: true,
		Delivery:     func(id string) string { return "whd_" + id },
		Sign: func(t testing.TB, id string, body []byte, _ time.Time, old bool) http.Header {
			secret := ShopifySecret
			if old {
				secret = ShopifyOldSecret
			}
			var topic struct{ Topic string }
			if err := json.Unmarshal(body, &topic); err != nil {
				t.Fatal(err)
			}
			return SignShopify(body, secret, topic.Topic, id)
		},
		Paid:  func(p string) (string, []byte) { return "evt-paid-" + p, ShopifyOrder("orders/paid", p, "paid") },
		Other: func(p string) (string, []byte) { return "evt-create-" + p, ShopifyOrder("orders/create", p, "paid") },
		Unpaid: func(p string) (string, []byte) {
			return "evt-pending-" + p, ShopifyOrder("orders/paid", "9"+p, "pending")
		},
		Reversed: func(p string) (string, []byte) {
			return "evt-refunded-" + p, ShopifyOrder("orders/updated", p, "refunded")
		},
	})
}
