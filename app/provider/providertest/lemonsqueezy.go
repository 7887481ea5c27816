package providertest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// SignLemonSqueezy makes the headers Lemon Squeezy sends with body: the
// hex HMAC-SHA256 of it in X-Signature, and the event's name.
func SignLemonSqueezy(body []byte, secret, eventName string) http.Header {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Signature", hex.EncodeToString(mac.Sum(nil)))
	h.Set("X-Event-Name", eventName)
	return h
}

// The Lemon Squeezy sample's signing secrets: the current one, and one
// being rotated out.
const (
	LemonSqueezySecret    = "lemonsqueezy_signing_secret_tests_01"
	LemonSqueezyOldSecret = "lemonsqueezy_signing_secret_tests_00"
)

// LemonSqueezyEvent is a Lemon Squeezy webhook body: a JSON:API object
// under meta.
func LemonSqueezyEvent(name, typ, id, attrs string) []byte {
	return fmt.Appendf(nil, `{"meta":{"test_mode":false,"event_name":%q},"data":{"type":%q,"id":%q,"attributes":{%s,"updated_at":"2026-12-01T00:00:00.000000Z"}}}`, name, typ, id, attrs)
}

func init() {
	RegisterSample(Sample{
		Name:         "lemonsqueezy",
		Settings:     map[string]string{"GUARDIAN_LEMONSQUEEZY_SECRETS": LemonSqueezySecret + "," + LemonSqueezyOldSecret},
		UnsignedTime: true,
		Sign: func(t testing.TB, _ string, body []byte, _ time.Time, old bool) http.Header {
			secret := LemonSqueezySecret
			if old {
				secret = LemonSqueezyOldSecret
			}
			var ev struct {
				Meta struct {
					EventName string `json:"event_name"`
				}
			}
			if err := json.Unmarshal(body, &ev); err != nil {
				t.Fatal(err)
			}
			return SignLemonSqueezy(body, secret, ev.Meta.EventName)
		},
		// Lemon Squeezy's event ids are made from the event's name and object.
		Paid: func(p string) (string, []byte) {
			return "order_created:orders:" + p + ":2026-12-01T00:00:00.000000Z", LemonSqueezyEvent("order_created", "orders", p, `"status":"paid"`)
		},
		Other: func(p string) (string, []byte) {
			return "subscription_created:subscriptions:s" + p + ":2026-12-01T00:00:00.000000Z", LemonSqueezyEvent("subscription_created", "subscriptions", "s"+p, `"status":"active","order_id":1`)
		},
		Unpaid: func(p string) (string, []byte) {
			return "order_created:orders:u" + p + ":2026-12-01T00:00:00.000000Z", LemonSqueezyEvent("order_created", "orders", "u"+p, `"status":"pending"`)
		},
		Reversed: func(p string) (string, []byte) {
			return "order_refunded:orders:" + p + ":2026-12-01T00:00:00.000000Z", LemonSqueezyEvent("order_refunded", "orders", p, `"status":"refunded"`)
		},
	})
}
