package web_test

import (
	"cmp"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/web"
)

// TestEveryProviderConforms runs every registered provider through
// providertest's suite at the HTTP edge, with the real domain and database
// behind it. A registered provider without a sample fails here.
func TestEveryProviderConforms(t *testing.T) {
	t.Parallel()
	drivers := provider.Drivers()
	require.NotEmpty(t, drivers)
	for _, d := range drivers {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			s, ok := providertest.SampleOf(d.Name)
			require.True(t, ok, "%s is registered without a sample in providertest: the suite cannot run it", d.Name)
			providertest.Run(t, s, &edge{b: setup(t, setupOpts{})})
		})
	}
	for _, s := range providertest.Samples() {
		_, ok := provider.Lookup(s.Name)
		require.True(t, ok, "providertest has a sample of %s, which is not a registered provider", s.Name)
	}
}

// edge is the test server as providertest's suite sees it.
type edge struct{ b *testBundle }

func (e *edge) Post(t *testing.T, name string, h http.Header, body []byte) int {
	return e.b.post(t, "/webhooks/"+name, h, body).code
}

func (e *edge) Events(t *testing.T, name, id string) int {
	if id == "" {
		return e.b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE provider = $1`, name)
	}
	return e.b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE provider = $1 AND event_id = $2`, name, id)
}

// DeliveryID reads the delivery id from the row and from the operator
// API, and fails when they differ.
func (e *edge) DeliveryID(t *testing.T, name, id string) string {
	var stored *string
	require.NoError(t, e.b.db.Pool.QueryRow(e.b.ctx, `SELECT delivery_id FROM webhook_event WHERE provider = $1 AND event_id = $2`, name, id).Scan(&stored))
	code, raw := e.b.api(t, "GET", "/api/v1/events/"+name+"/"+id, e.b.token, nil)
	require.Equal(t, http.StatusOK, code)
	var got web.EventDetail
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Equal(t, cmp.Or(stored, new(string)), &got.Event.DeliveryID, "the API answers the stored delivery id")
	return got.Event.DeliveryID
}

func (e *edge) Fulfilments(t *testing.T, name string, action state.Action, st state.State) int {
	return e.b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE provider = $1 AND action = $2 AND ($3 = '' OR state = $3)`, name, string(action), string(st))
}

func (e *edge) Calls(t *testing.T, name string) []state.Action {
	fs, err := db.FulfilmentsByPayment(e.b.ctx, e.b.db.Pool, name, paymentOf(t, e.b, name))
	require.NoError(t, err)
	require.NotEmpty(t, fs)
	var out []state.Action
	for _, c := range e.b.rec.Calls() {
		if c.PaymentID == fs[0].PaymentID {
			out = append(out, c.Action)
		}
	}
	return out
}

// paymentOf reads the one payment of provider's fulfilments.
func paymentOf(t *testing.T, b *testBundle, name string) string {
	t.Helper()
	var p string
	require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT DISTINCT payment_id FROM fulfilment WHERE provider = $1`, name).Scan(&p))
	return p
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
	body := providertest.PayPalEvent("WH-DOWN-1", "PAYMENT.CAPTURE.COMPLETED", "CAPDOWN1", "COMPLETED")
	h, err := providertest.SignPayPal(body, payPalKey(), providertest.PayPalCertDownURL, payPalWebhook, "tx-down", time.Now())
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, b.post(t, "/webhooks/paypal", h, body).code)
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM webhook_event`))
	// Refusals are written behind the answer, in order: a real refusal
	// after the 503 shows, once written, whether the 503 was written too.
	require.Equal(t, http.StatusBadRequest, b.post(t, "/webhooks/paypal", http.Header{}, body).code)
	require.Eventually(t, func() bool { return b.db.Count(t, `SELECT count(*) FROM refused_delivery`) > 0 }, 5*time.Second, 20*time.Millisecond)
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM refused_delivery`), "the 503 is no refusal")
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM refused_delivery WHERE reason = 'signature'`))
	h, err = providertest.SignPayPal(body, payPalKey(), providertest.PayPalCertURL, payPalWebhook, "tx-up", time.Now())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, b.post(t, "/webhooks/paypal", h, body).code, "the retry, once PayPal answers")
}
