package web_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/provider/providertest"
)

// TestARefundThatDoesNotSayWholeIsWeighed: Stripe's refund.updated and
// PayPal's PAYMENT.CAPTURE.REFUNDED do not say whether they return the
// whole payment. Delivered with the providers' own schemes, a refund of
// the whole amount paid takes the payment back under the default policy
// (full_refund), and one of a part does not.
func TestARefundThatDoesNotSayWholeIsWeighed(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	revokes := func(payment string) int {
		return b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE payment_id = $1 AND action = 'revoke'`, payment)
	}
	stripe := func(body string) {
		got := b.post(t, "/webhooks/stripe", providertest.SignStripe([]byte(body), stripeSecret, time.Now()), []byte(body))
		require.Equal(t, http.StatusOK, got.code, string(got.raw))
	}
	session := func(payment string) string {
		return fmt.Sprintf(`{"id":"evt_cs_%s","object":"event","type":"checkout.session.completed","data":{"object":{"id":"cs_%s","object":"checkout.session","mode":"payment","payment_status":"paid","payment_intent":%q,"amount_total":1999,"currency":"usd"}}}`, payment, payment, payment)
	}
	refund := func(payment, refund string, amount int) string {
		return fmt.Sprintf(`{"id":"evt_%s","object":"event","type":"refund.updated","data":{"object":{"id":%q,"object":"refund","status":"succeeded","payment_intent":%q,"amount":%d,"currency":"usd"}}}`, refund, refund, payment, amount)
	}
	stripe(session("pi_whole"))
	stripe(session("pi_part"))
	b.waitFulfilled(t, "pi_whole")
	b.waitFulfilled(t, "pi_part")
	stripe(refund("pi_whole", "re_whole", 1999))
	stripe(refund("pi_part", "re_part", 500))
	require.Equal(t, 1, revokes("pi_whole"), "the whole amount refunded: taken back")
	require.Zero(t, revokes("pi_part"), "a part refunded: kept")

	paypal := func(id, typ, resource string) {
		body := []byte(fmt.Sprintf(`{"id":%q,"event_type":%q,"resource":%s}`, id, typ, resource))
		h, err := providertest.SignPayPal(body, payPalKey(), payPalCertURL, payPalWebhook, "tx-"+id, time.Now())
		require.NoError(t, err)
		got := b.post(t, "/webhooks/paypal", h, body)
		require.Equal(t, http.StatusOK, got.code, string(got.raw))
	}
	paypal("WH-CAP", "PAYMENT.CAPTURE.COMPLETED", `{"id":"2GG279541U471931P","status":"COMPLETED","amount":{"currency_code":"USD","value":"10.99"}}`)
	require.Eventually(t, func() bool {
		return b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE payment_id = '2GG279541U471931P' AND state = 'fulfilled'`) == 1
	}, 15*time.Second, 10*time.Millisecond)
	paypal("WH-REF", "PAYMENT.CAPTURE.REFUNDED", `{"id":"1Y107995YT783435V","status":"COMPLETED","amount":{"currency_code":"USD","value":"10.99"},`+
		`"links":[{"href":"https://api.paypal.com/v2/payments/captures/2GG279541U471931P","rel":"up","method":"GET"}]}`)
	require.Equal(t, 1, revokes("2GG279541U471931P"), "PayPal's refund of the whole capture: taken back")
}
