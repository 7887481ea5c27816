package providertest

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// SignStandard returns the Standard Webhooks headers for a message with id
// and body, signed with secret ("whsec_...") at t by the scheme's reference
// library.
func SignStandard(id string, body []byte, secret string, t time.Time) (http.Header, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, err
	}
	sig, err := wh.Sign(id, t, body)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set(standardwebhooks.HeaderWebhookID, id)
	h.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(t.Unix(), 10))
	h.Set(standardwebhooks.HeaderWebhookSignature, sig)
	return h, nil
}

// StandardSecret is the Standard Webhooks sample's secret.
const StandardSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func init() {
	RegisterSample(Sample{
		Name:     "standard",
		Settings: map[string]string{"GUARDIAN_STANDARD_SECRETS": StandardSecret},
		Sign: func(t testing.TB, id string, body []byte, at time.Time, old bool) http.Header {
			if old {
				return nil
			}
			h, err := SignStandard(id, body, StandardSecret, at)
			if err != nil {
				t.Fatal(err)
			}
			return h
		},
		Paid: func(p string) (string, []byte) {
			return "msg_paid_" + p, fmt.Appendf(nil, `{"type":"payment.succeeded","data":{"payment_id":"pay_%s"}}`, p)
		},
		Other: func(p string) (string, []byte) {
			return "msg_again_" + p, fmt.Appendf(nil, `{"type":"payment.succeeded","data":{"payment_id":"pay_%s","note":"a second message"}}`, p)
		},
		Unpaid: func(p string) (string, []byte) {
			return "msg_unpaid_" + p, []byte(`{"type":"payment.succeeded","data":{"amount":100}}`)
		},
		Reversed: func(p string) (string, []byte) {
			return "msg_refunded_" + p, fmt.Appendf(nil, `{"type":"payment.refunded","data":{"payment_id":"pay_%s"}}`, p)
		},
	})
}
