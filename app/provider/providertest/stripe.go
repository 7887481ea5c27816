package providertest

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"
)

// SignStripe returns the headers Stripe would send with body, signed with
// secret at t by stripe-go. Guardian's demo, load generator and tests sign
// with it, so what they send is what Stripe's own library makes.
func SignStripe(body []byte, secret string, t time.Time) http.Header {
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: t})
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Stripe-Signature", signed.Header)
	return h
}

// StripeSecret is the Stripe sample's endpoint secret.
const StripeSecret = "whsec_test_stripe_secret_for_guardian_suites"

// StripePaid is a Checkout session completed and paid, paying for
// paymentID: the Stripe event most tests pay with.
func StripePaid(eventID, paymentID string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"object":"event","type":"checkout.session.completed","data":{"object":{"id":"cs_%s","object":"checkout.session","mode":"payment","payment_status":"paid","payment_intent":%q}}}`, eventID, eventID, paymentID)
}

// StripeAsyncPaid is a Checkout session's delayed payment succeeding: the
// same purchase's other fulfilling event.
func StripeAsyncPaid(eventID, paymentID string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"object":"event","type":"checkout.session.async_payment_succeeded","data":{"object":{"id":"cs_%s","object":"checkout.session","mode":"payment","payment_status":"paid","payment_intent":%q}}}`, eventID, eventID, paymentID)
}

func init() {
	RegisterSample(Sample{
		Name:     "stripe",
		Settings: map[string]string{"GUARDIAN_STRIPE_SECRETS": StripeSecret},
		Sign: func(_ testing.TB, _ string, body []byte, at time.Time, old bool) http.Header {
			if old {
				return nil // Stripe's secrets rotate in the endpoint; app/provider tests a list of two
			}
			return SignStripe(body, StripeSecret, at)
		},
		Paid:  func(p string) (string, []byte) { return "evt_cs_" + p, StripePaid("evt_cs_"+p, "pi_"+p) },
		Other: func(p string) (string, []byte) { return "evt_async_" + p, StripeAsyncPaid("evt_async_"+p, "pi_"+p) },
		Unpaid: func(p string) (string, []byte) {
			id := "evt_unpaid_" + p
			return id, fmt.Appendf(nil, `{"id":%q,"object":"event","type":"checkout.session.completed","data":{"object":{"id":"cs_u_%s","object":"checkout.session","mode":"payment","payment_status":"unpaid","payment_intent":"pi_u_%s"}}}`, id, p, p)
		},
		Reversed: func(p string) (string, []byte) {
			id := "evt_refunded_" + p
			return id, fmt.Appendf(nil, `{"id":%q,"object":"event","type":"charge.refunded","data":{"object":{"id":"ch_%s","object":"charge","payment_intent":"pi_%s","refunded":true}}}`, id, p, p)
		},
	})
}
