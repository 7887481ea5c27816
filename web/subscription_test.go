package web_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/actions"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/web"
)

// TestStripeSubscriptionThroughTheEdge: a subscription's life as Stripe
// delivers it, signed, through the webhook endpoint: the start grants
// once, a cancellation at the period's end changes nothing, the deletion
// takes the grant back once, and its redelivery and a late update saying
// canceled add nothing.
func TestStripeSubscriptionThroughTheEdge(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	subscription := func(id, typ, status string, cancelAtPeriodEnd bool) string {
		return fmt.Sprintf(`{"id":%q,"object":"event","type":%q,"data":{"object":{"id":"sub_edge","object":"subscription","status":%q,"cancel_at_period_end":%t,"customer":"cus_1"}}}`,
			id, typ, status, cancelAtPeriodEnd)
	}
	start := `{"id":"evt_start","object":"event","type":"checkout.session.completed","data":{"object":{"id":"cs_edge","object":"checkout.session","mode":"subscription","payment_status":"paid","payment_intent":null,"subscription":"sub_edge","amount_total":900,"currency":"eur"}}}`
	require.Equal(t, http.StatusOK, b.postStripe(t, start).code)
	require.Eventually(t, func() bool { return len(b.rec.Calls()) == 1 }, 15*time.Second, 10*time.Millisecond)
	require.Equal(t, http.StatusOK, b.postStripe(t, subscription("evt_cancel", "customer.subscription.updated", "active", true)).code)
	time.Sleep(300 * time.Millisecond)
	require.Len(t, b.rec.Calls(), 1, "cancelled at the period's end: access lasts until then")

	deleted := subscription("evt_deleted", "customer.subscription.deleted", "canceled", false)
	for _, body := range []string{deleted, deleted, subscription("evt_updated", "customer.subscription.updated", "canceled", false)} {
		require.Equal(t, http.StatusOK, b.postStripe(t, body).code)
	}
	require.Eventually(t, func() bool { return len(b.rec.Calls()) == 2 }, 15*time.Second, 10*time.Millisecond)
	calls := b.rec.Calls()
	require.Equal(t, state.Fulfil, calls[0].Action)
	require.Equal(t, state.Revoke, calls[1].Action)
	require.Equal(t, "cs_edge", calls[1].PaymentID)
	time.Sleep(300 * time.Millisecond)
	require.Len(t, b.rec.Calls(), 2, "two ends take back once")
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE ends = 'sub_edge' AND reverses = 'cs_edge'`))

	// Operators see it: listed by state, its page with what was granted
	// and taken back, and an end whose start never came.
	orphan := `{"id":"evt_orphan","object":"event","type":"customer.subscription.deleted","data":{"object":{"id":"sub_orphan","object":"subscription","status":"canceled"}}}`
	require.Equal(t, http.StatusOK, b.postStripe(t, orphan).code)
	code, raw := b.api(t, "GET", "/api/v1/subscriptions?state=ended", b.token, nil)
	require.Equal(t, http.StatusOK, code)
	var list web.SubscriptionList
	require.NoError(t, json.Unmarshal(raw, &list))
	require.Len(t, list.Subscriptions, 1)
	require.Equal(t, "sub_edge", list.Subscriptions[0].SubscriptionID)
	require.NotNil(t, list.Subscriptions[0].EndedAt)
	require.Equal(t, 1, list.EndsAwaitingStart)
	code, raw = b.api(t, "GET", "/api/v1/subscriptions?state=active", b.token, nil)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"subscriptions":[],"ends_awaiting_start":1}`, string(raw))
	code, _ = b.api(t, "GET", "/api/v1/subscriptions?state=lapsed", b.token, nil)
	require.Equal(t, http.StatusBadRequest, code)
	code, raw = b.api(t, "GET", "/api/v1/subscriptions/stripe/sub_edge", b.token, nil)
	require.Equal(t, http.StatusOK, code)
	var d web.SubscriptionDetail
	require.NoError(t, json.Unmarshal(raw, &d))
	require.Equal(t, "cs_edge", d.Subscription.PaymentID)
	require.Len(t, d.Fulfilments, 2)
	require.Len(t, d.Events, 4, "the start, the cancel click (still active), the deletion, the update saying canceled")
	require.NotContains(t, string(raw), `"payload"`)
	code, _ = b.api(t, "GET", "/api/v1/subscriptions/stripe/sub_nothing", b.token, nil)
	require.Equal(t, http.StatusNotFound, code)

	op := newBrowser(t, b)
	code, _ = op.signIn(b.token)
	require.Equal(t, http.StatusSeeOther, code)
	code, body, _ := op.get("/subscriptions")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `href="/subscriptions/stripe/sub_edge"`)
	require.Contains(t, body, "1 stored end names a subscription whose start Guardian has not linked")
	code, body, _ = op.get("/subscriptions/stripe/sub_edge")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "take-back")
	require.Contains(t, body, "customer.subscription.deleted")
}

// TestPaddleAndLemonSqueezySubscriptionsThroughTheEdge: each provider's
// life of a subscription, from Paddle's SDK mocks and Lemon Squeezy's
// documented events, signed as each signs, through the webhook endpoints,
// in two orders each: the start first (granted, then taken back once), and
// the end before the start (Paddle's never granted; Lemon Squeezy's order
// names no subscription, so it is granted and taken back, or never sent,
// as the link comes). The receiver's ledger holds no access after the end
// either way.
func TestPaddleAndLemonSqueezySubscriptionsThroughTheEdge(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{sweepInterval: time.Second})
	testdata := func(name string, edit func(env, data map[string]any)) []byte { return editedTestdata(t, name, edit) }
	paddle := func(body []byte) {
		t.Helper()
		require.Equal(t, http.StatusOK, b.post(t, "/webhooks/paddle", providertest.SignPaddle(body, providertest.PaddleSecret, time.Now()), body).code)
	}
	lemon := func(name, typ, id, attrs string) {
		t.Helper()
		body := providertest.LemonSqueezyEvent(name, typ, id, attrs)
		require.Equal(t, http.StatusOK, b.post(t, "/webhooks/lemonsqueezy", providertest.SignLemonSqueezy(body, providertest.LemonSqueezySecret, name), body).code)
	}
	calls := b.actionsFor
	settled := func(payment string, want ...state.Action) {
		t.Helper()
		require.Eventually(t, func() bool { return len(calls(payment)) == len(want) }, 15*time.Second, 10*time.Millisecond, "%s: %v", payment, calls(payment))
		time.Sleep(200 * time.Millisecond)
		require.Equal(t, want, calls(payment), payment)
	}

	for i, endFirst := range []bool{false, true} {
		n := fmt.Sprint(i)
		txn, sub := "txn_life_"+n, "sub_life_"+n
		completed := testdata("paddle/transaction_completed.json", func(env, d map[string]any) {
			env["event_id"], d["id"], d["subscription_id"], d["origin"] = "evt_txn_"+n, txn, sub, "web"
		})
		created := testdata("paddle/subscription_created.json", func(env, d map[string]any) {
			env["event_id"], d["id"], d["transaction_id"] = "evt_subc_"+n, sub, txn
		})
		canceled := testdata("paddle/subscription_canceled.json", func(env, d map[string]any) { env["event_id"], d["id"] = "evt_subx_"+n, sub })
		order, lsSub := "90"+n, "70"+n
		lsEvents := []func(){
			func() { lemon("order_created", "orders", order, `"status":"paid","total":900,"currency":"USD"`) },
			func() {
				lemon("subscription_created", "subscriptions", lsSub, `"order_id":`+order+`,"status":"active"`)
			},
			func() {
				lemon("subscription_cancelled", "subscriptions", lsSub, `"order_id":`+order+`,"status":"cancelled"`)
			},
		}
		lsEnd := func() {
			lemon("subscription_expired", "subscriptions", lsSub, `"order_id":`+order+`,"status":"expired"`)
		}
		if endFirst {
			paddle(canceled)
			lsEnd()
			time.Sleep(200 * time.Millisecond)
			paddle(completed)
			paddle(created)
			for _, f := range lsEvents {
				f()
			}
			settled(txn) // the transaction names its subscription: never granted
			// Lemon Squeezy's order does not name its subscription: until
			// subscription_created links them the order is a purchase like
			// any, and its grant may go out; the link then takes it back
			// (at once, or by the sweep once a grant in flight settles).
			// Either way no access is left after the end.
			require.Eventually(t, func() bool {
				c := calls(order)
				live := b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE payment_id = $1 AND state IN ('pending', 'dispatching', 'needs_reconciliation')`, order)
				return live == 0 && (len(c) == 0 || slices.Equal(c, []state.Action{state.Fulfil, state.Revoke}))
			}, 15*time.Second, 10*time.Millisecond, "%s: %v", order, calls(order))
			continue
		}
		paddle(completed)
		paddle(created)
		for _, f := range lsEvents {
			f()
		}
		settled(txn, state.Fulfil)
		settled(order, state.Fulfil)
		paddle(canceled)
		paddle(canceled)
		lsEnd()
		settled(txn, state.Fulfil, state.Revoke)
		settled(order, state.Fulfil, state.Revoke)
	}
}

// TestPayPalSubscriptionThroughTheEdge: PayPal's activation grants once,
// a suspension and a cycle's sale change nothing, the cancellation takes
// the grant back once, all signed as PayPal signs.
func TestPayPalSubscriptionThroughTheEdge(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	sample, ok := providertest.SampleOf("paypal")
	require.True(t, ok)
	post := func(id, typ, resource string) {
		t.Helper()
		body := []byte(fmt.Sprintf(`{"id":%q,"event_type":%q,"resource_type":"subscription","resource":%s}`, id, typ, resource))
		require.Equal(t, http.StatusOK, b.post(t, "/webhooks/paypal", sample.Sign(t, id, body, time.Now(), false), body).code)
	}
	calls := func() []state.Action {
		var out []state.Action
		for _, c := range b.rec.Calls() {
			if c.PaymentID == "I-EDGE0SUB" {
				out = append(out, c.Action)
			}
		}
		return out
	}
	post("WH-SUB-ACT", "BILLING.SUBSCRIPTION.ACTIVATED", `{"id":"I-EDGE0SUB","status":"ACTIVE","billing_info":{"last_payment":{"amount":{"currency_code":"USD","value":"9.00"}}}}`)
	require.Eventually(t, func() bool { return len(calls()) == 1 }, 15*time.Second, 10*time.Millisecond)
	post("WH-SUB-SUS", "BILLING.SUBSCRIPTION.SUSPENDED", `{"id":"I-EDGE0SUB","status":"SUSPENDED"}`)
	post("WH-SUB-SALE", "PAYMENT.SALE.COMPLETED", `{"id":"80021663DE681814L","state":"completed","billing_agreement_id":"I-EDGE0SUB"}`)
	post("WH-SUB-CAN", "BILLING.SUBSCRIPTION.CANCELLED", `{"id":"I-EDGE0SUB","status":"CANCELLED"}`)
	post("WH-SUB-EXP", "BILLING.SUBSCRIPTION.EXPIRED", `{"id":"I-EDGE0SUB","status":"EXPIRED"}`)
	require.Eventually(t, func() bool { return len(calls()) == 2 }, 15*time.Second, 10*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, []state.Action{state.Fulfil, state.Revoke}, calls(), "granted once, taken back once for two ends")
}

// TestStripeSubscriptionPaymentRefundThroughTheEdge: a refund of a
// subscription's first payment names only its payment intent; the
// invoice's events, delivered through the same endpoint, place it, and
// the start's grant is taken back once. The subscription's page shows the
// refund.
func TestStripeSubscriptionPaymentRefundThroughTheEdge(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	for _, body := range []string{
		`{"id":"evt_pr_start","object":"event","type":"checkout.session.completed","data":{"object":{"id":"cs_pr","object":"checkout.session","mode":"subscription","payment_status":"paid","payment_intent":null,"subscription":"sub_pr","invoice":"in_pr","amount_total":900,"currency":"eur"}}}`,
		`{"id":"evt_pr_invoice","object":"event","type":"invoice.paid","data":{"object":{"id":"in_pr","object":"invoice","billing_reason":"subscription_create","amount_paid":900,"currency":"eur","parent":{"type":"subscription_details","subscription_details":{"subscription":"sub_pr"}}}}}`,
	} {
		require.Equal(t, http.StatusOK, b.postStripe(t, body).code)
	}
	require.Eventually(t, func() bool { return len(b.rec.Calls()) == 1 }, 15*time.Second, 10*time.Millisecond)

	renewal := `{"id":"evt_pr_renewal","object":"event","type":"invoice.paid","data":{"object":{"id":"in_pr2","object":"invoice","billing_reason":"subscription_cycle","amount_paid":900,"currency":"eur","parent":{"type":"subscription_details","subscription_details":{"subscription":"sub_pr"}}}}}`
	require.Equal(t, http.StatusOK, b.postStripe(t, renewal).code)
	refund := `{"id":"evt_pr_refund","object":"event","type":"refund.created","data":{"object":{"id":"re_pr","object":"refund","payment_intent":"pi_pr","amount":900,"currency":"eur","status":"succeeded"}}}`
	require.Equal(t, http.StatusOK, b.postStripe(t, refund).code)
	time.Sleep(300 * time.Millisecond)
	require.Len(t, b.rec.Calls(), 1, "a refund of a payment Guardian cannot place yet takes nothing back")
	payment := `{"id":"evt_pr_payment","object":"event","type":"invoice_payment.paid","data":{"object":{"id":"inpay_pr","object":"invoice_payment","invoice":"in_pr","status":"paid","payment":{"type":"payment_intent","payment_intent":"pi_pr"}}}}`
	for range 2 {
		require.Equal(t, http.StatusOK, b.postStripe(t, payment).code)
	}
	require.Eventually(t, func() bool { return len(b.rec.Calls()) == 2 }, 15*time.Second, 10*time.Millisecond)
	calls := b.rec.Calls()
	require.Equal(t, state.Revoke, calls[1].Action)
	require.Equal(t, "cs_pr", calls[1].PaymentID)
	time.Sleep(300 * time.Millisecond)
	require.Len(t, b.rec.Calls(), 2, "taken back once")

	code, raw := b.api(t, "GET", "/api/v1/subscriptions/stripe/sub_pr", b.token, nil)
	require.Equal(t, http.StatusOK, code)
	var d web.SubscriptionDetail
	require.NoError(t, json.Unmarshal(raw, &d))
	require.Equal(t, []string{"in_pr2"}, d.Renewals, "a renewal recorded (invoice.paid does not fulfil by default)")
	require.Len(t, d.Events, 2, "the start and the refund that took it back (an invoice's events pay for nothing here)")
	require.Equal(t, "refund.created", d.Events[1].Type)
	op := newBrowser(t, b)
	code, _ = op.signIn(b.token)
	require.Equal(t, http.StatusSeeOther, code)
	code, page, _ := op.get("/subscriptions/stripe/sub_pr")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "<code>in_pr2</code>")
}

// TestShopifySubscriptionContractThroughTheEdge: an order with a selling
// plan is paid, Shopify creates its subscription contract (naming the
// order), pauses and cancels it; the order's grant is taken back once.
// With the cancellation first, the order is never granted.
func TestShopifySubscriptionContractThroughTheEdge(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	post := func(topic, id, body string) {
		t.Helper()
		require.Equal(t, http.StatusOK, b.post(t, "/webhooks/shopify", providertest.SignShopify([]byte(body), shopifySecret, topic, id), []byte(body)).code)
	}
	contract := func(id, order int, status string) string {
		return fmt.Sprintf(`{"id":%d,"admin_graphql_api_id":"gid://shopify/SubscriptionContract/%d","origin_order_id":%d,`+
			`"admin_graphql_api_origin_order_id":"gid://shopify/Order/%d","status":%q,"currency_code":"USD"}`, id, id, order, order, status)
	}
	paid := func(order int) string {
		return fmt.Sprintf(`{"id":%d,"financial_status":"paid","test":false,"total_price":"9.00","currency":"USD"}`, order)
	}
	calls := b.actionsFor

	post("orders/paid", "evt-order-801", paid(801))
	require.Eventually(t, func() bool { return len(calls("801")) == 1 }, 15*time.Second, 10*time.Millisecond)
	post("subscription_contracts/create", "evt-create-71", contract(71, 801, "active"))
	post("subscription_contracts/pause", "evt-pause-71", contract(71, 801, "paused"))
	post("subscription_contracts/cancel", "evt-cancel-71", contract(71, 801, "cancelled"))
	post("subscription_contracts/cancel", "evt-cancel-71", contract(71, 801, "cancelled"))
	require.Eventually(t, func() bool { return len(calls("801")) == 2 }, 15*time.Second, 10*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, []state.Action{state.Fulfil, state.Revoke}, calls("801"), "granted once, taken back once")

	post("subscription_contracts/cancel", "evt-cancel-72", contract(72, 802, "cancelled"))
	post("orders/paid", "evt-order-802", paid(802))
	time.Sleep(500 * time.Millisecond)
	require.Empty(t, calls("802"), "the contract cancelled before its order was paid: nothing granted")
	code, raw := b.api(t, "GET", "/api/v1/subscriptions/shopify/72", b.token, nil)
	require.Equal(t, http.StatusOK, code)
	var d web.SubscriptionDetail
	require.NoError(t, json.Unmarshal(raw, &d))
	require.Equal(t, "802", d.Subscription.PaymentID)
	require.NotNil(t, d.Subscription.EndedAt)
}

// actionsFor lists, in order, the actions the receiver was sent for a
// payment.
func (b *testBundle) actionsFor(payment string) []state.Action {
	var out []state.Action
	for _, c := range b.rec.Calls() {
		if c.PaymentID == payment {
			out = append(out, c.Action)
		}
	}
	return out
}

// TestStripeSuspensionThroughTheEdge: with subscription_suspended in the
// action's policy, a subscription past due is taken back and, paid up
// again, granted again under a key of its own; a stale past-due word that
// arrives after it changes nothing, and the deletion takes back the grant
// in force. Signed and dated as Stripe sends them.
func TestStripeSuspensionThroughTheEdge(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{sweepInterval: time.Second, fulfilment: func(c *fulfilment.Config) {
		c.Reversals = append(actions.Policy{actions.SubscriptionSuspended}, actions.DefaultPolicy...) // GUARDIAN_REVOKE_ON
	}})
	updated := func(id string, created int64, status string) string {
		return fmt.Sprintf(`{"id":%q,"object":"event","created":%d,"type":"customer.subscription.updated","data":{"object":{"id":"sub_due","object":"subscription","status":%q,"cancel_at_period_end":false}}}`,
			id, created, status)
	}
	start := `{"id":"evt_due_start","object":"event","created":1764576000,"type":"checkout.session.completed","data":{"object":{"id":"cs_due","object":"checkout.session","mode":"subscription","payment_status":"paid","payment_intent":null,"subscription":"sub_due","amount_total":900,"currency":"eur"}}}`
	post := func(body string) {
		t.Helper()
		require.Equal(t, http.StatusOK, b.postStripe(t, body).code)
	}
	post(start)
	require.Eventually(t, func() bool { return len(b.rec.Calls()) == 1 }, 15*time.Second, 10*time.Millisecond)
	post(updated("evt_due_1", 1764579600, "past_due"))
	require.Eventually(t, func() bool { return len(b.rec.Calls()) == 2 }, 15*time.Second, 10*time.Millisecond)
	post(updated("evt_paid_1", 1764583200, "active"))
	post(updated("evt_due_late", 1764580000, "past_due")) // older than the payment: stale
	require.Eventually(t, func() bool { return len(b.rec.Calls()) == 3 }, 15*time.Second, 10*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	post(`{"id":"evt_due_end","object":"event","created":1764590000,"type":"customer.subscription.deleted","data":{"object":{"id":"sub_due","object":"subscription","status":"canceled"}}}`)
	require.Eventually(t, func() bool { return len(b.rec.Calls()) == 4 }, 15*time.Second, 10*time.Millisecond)
	time.Sleep(300 * time.Millisecond)

	calls := b.rec.Calls()
	require.Len(t, calls, 4)
	got := make([]string, len(calls))
	keys := map[string]bool{}
	for i, c := range calls {
		got[i], keys[c.Key] = string(c.Action)+" "+c.PaymentID, true
	}
	require.Equal(t, []string{"fulfil cs_due", "revoke cs_due", "fulfil cs_due~1", "revoke cs_due~1"}, got)
	require.Len(t, keys, 4)

	code, raw := b.api(t, "GET", "/api/v1/subscriptions/stripe/sub_due", b.token, nil)
	require.Equal(t, http.StatusOK, code)
	var d web.SubscriptionDetail
	require.NoError(t, json.Unmarshal(raw, &d))
	require.Equal(t, "ended", d.Subscription.State)
	require.Equal(t, []string{"cs_due", "cs_due~1"}, d.Subscription.Grants)
	require.Len(t, d.Fulfilments, 4, "each grant's grant and take-back")
	require.Len(t, d.Events, 5, "the start, two suspensions (one stale), the payment, the end")
}

// TestRenewalsThroughTheEdge: each provider's subscription life, signed as
// the provider signs, through the webhook endpoints, renewals fulfilling:
// the start, two renewals, the cancel click where the provider has one,
// and the end. The receiver is sent the start once and each renewal once,
// and the end takes back the start alone.
func TestRenewalsThroughTheEdge(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{vars: map[string]string{
		"GUARDIAN_STRIPE_FULFIL_TYPES":          "checkout.session.completed,invoice.paid",
		"GUARDIAN_PADDLE_FULFIL_RENEWALS":       "true",
		"GUARDIAN_LEMONSQUEEZY_FULFIL_RENEWALS": "true",
		"GUARDIAN_PAYPAL_FULFIL_RENEWALS":       "true",
	}})
	settled := func(payment string, want ...state.Action) {
		t.Helper()
		require.Eventually(t, func() bool { return len(b.actionsFor(payment)) >= len(want) }, 15*time.Second, 10*time.Millisecond, "%s: %v", payment, b.actionsFor(payment))
		time.Sleep(100 * time.Millisecond)
		require.Equal(t, want, b.actionsFor(payment), payment)
	}
	testdata := func(name string, edit func(env, data map[string]any)) []byte { return editedTestdata(t, name, edit) }
	type life struct {
		start    string
		renewals []string
		deliver  []func()
	}
	stripe := func(body string) func() {
		return func() { require.Equal(t, http.StatusOK, b.postStripe(t, body).code) }
	}
	paddle := func(body []byte) func() {
		return func() {
			require.Equal(t, http.StatusOK, b.post(t, "/webhooks/paddle", providertest.SignPaddle(body, providertest.PaddleSecret, time.Now()), body).code)
		}
	}
	lemon := func(name, typ, id, attrs string) func() {
		return func() {
			body := providertest.LemonSqueezyEvent(name, typ, id, attrs)
			require.Equal(t, http.StatusOK, b.post(t, "/webhooks/lemonsqueezy", providertest.SignLemonSqueezy(body, providertest.LemonSqueezySecret, name), body).code)
		}
	}
	paypalSample, ok := providertest.SampleOf("paypal")
	require.True(t, ok)
	paypal := func(id, typ, resource string) func() {
		return func() {
			body := []byte(fmt.Sprintf(`{"id":%q,"event_type":%q,"resource":%s}`, id, typ, resource))
			require.Equal(t, http.StatusOK, b.post(t, "/webhooks/paypal", paypalSample.Sign(t, id, body, time.Now(), false), body).code)
		}
	}
	shopify := func(topic, id, body string) func() {
		return func() {
			require.Equal(t, http.StatusOK, b.post(t, "/webhooks/shopify", providertest.SignShopify([]byte(body), shopifySecret, topic, id), []byte(body)).code)
		}
	}
	stripeInvoice := func(id string) string {
		return fmt.Sprintf(`{"id":"evt_%[1]s","object":"event","type":"invoice.paid","data":{"object":{"id":%[1]q,"object":"invoice","billing_reason":"subscription_cycle","amount_paid":900,"currency":"eur","parent":{"type":"subscription_details","subscription_details":{"subscription":"sub_rn"}}}}}`, id)
	}
	paddleTxn := func(id, origin string) []byte {
		return testdata("paddle/transaction_completed.json", func(env, d map[string]any) {
			env["event_id"], d["id"], d["subscription_id"], d["origin"] = "evt_"+id, id, "sub_rn_paddle", origin
		})
	}
	paypalSale := func(id string) func() {
		return paypal("WH-"+id, "PAYMENT.SALE.COMPLETED", fmt.Sprintf(`{"id":%q,"state":"completed","billing_agreement_id":"I-RN0EDGE","amount":{"total":"9.00","currency":"USD"}}`, id))
	}
	shopifyOrder := func(id int) func() {
		return shopify("orders/paid", fmt.Sprintf("evt-order-%d", id), fmt.Sprintf(`{"id":%d,"financial_status":"paid","test":false,"total_price":"9.00","currency":"USD"}`, id))
	}
	contract := func(status string) string {
		return `{"id":81,"admin_graphql_api_id":"gid://shopify/SubscriptionContract/81","origin_order_id":901,"status":"` + status + `"}`
	}
	for name, l := range map[string]life{
		"stripe": {"cs_rn", []string{"in_rn_1", "in_rn_2"}, []func(){
			stripe(`{"id":"evt_rn_start","object":"event","type":"checkout.session.completed","data":{"object":{"id":"cs_rn","object":"checkout.session","mode":"subscription","payment_status":"paid","payment_intent":null,"subscription":"sub_rn","invoice":"in_rn_0","amount_total":900,"currency":"eur"}}}`),
			stripe(stripeInvoice("in_rn_1")), stripe(stripeInvoice("in_rn_2")),
			stripe(`{"id":"evt_rn_cancel","object":"event","type":"customer.subscription.updated","data":{"object":{"id":"sub_rn","object":"subscription","status":"active","cancel_at_period_end":true}}}`),
			stripe(`{"id":"evt_rn_end","object":"event","type":"customer.subscription.deleted","data":{"object":{"id":"sub_rn","object":"subscription","status":"canceled"}}}`),
		}},
		"paddle": {"txn_rn_0", []string{"txn_rn_1", "txn_rn_2"}, []func(){
			paddle(paddleTxn("txn_rn_0", "web")), paddle(paddleTxn("txn_rn_1", "subscription_recurring")), paddle(paddleTxn("txn_rn_2", "subscription_recurring")),
			paddle(testdata("paddle/subscription_canceled.json", func(env, d map[string]any) {
				env["event_id"], env["event_type"], d["id"], d["status"] = "evt_rn_sched", "subscription.updated", "sub_rn_paddle", "active"
				d["scheduled_change"] = map[string]any{"action": "cancel", "effective_at": "2027-01-01T00:00:00Z", "resume_at": nil}
			})),
			paddle(testdata("paddle/subscription_canceled.json", func(env, d map[string]any) { env["event_id"], d["id"] = "evt_rn_cancel", "sub_rn_paddle" })),
		}},
		"lemonsqueezy": {"401", []string{"551", "552"}, []func(){
			lemon("order_created", "orders", "401", `"status":"paid","total":900,"currency":"USD"`),
			lemon("subscription_created", "subscriptions", "71", `"order_id":401,"status":"active"`),
			lemon("subscription_payment_success", "subscription-invoices", "551", `"subscription_id":71,"billing_reason":"renewal","status":"paid","total":900,"currency":"USD"`),
			lemon("subscription_payment_success", "subscription-invoices", "552", `"subscription_id":71,"billing_reason":"renewal","status":"paid","total":900,"currency":"USD"`),
			lemon("subscription_cancelled", "subscriptions", "71", `"order_id":401,"status":"cancelled"`),
			lemon("subscription_expired", "subscriptions", "71", `"order_id":401,"status":"expired"`),
		}},
		"paypal": {"I-RN0EDGE", []string{"SALE0RN1", "SALE0RN2"}, []func(){
			paypal("WH-RN-ACT", "BILLING.SUBSCRIPTION.ACTIVATED", `{"id":"I-RN0EDGE","status":"ACTIVE","billing_info":{"last_payment":{"amount":{"currency_code":"USD","value":"9.00"}}}}`),
			paypalSale("SALE0RN1"), paypalSale("SALE0RN2"),
			paypal("WH-RN-CAN", "BILLING.SUBSCRIPTION.CANCELLED", `{"id":"I-RN0EDGE","status":"CANCELLED"}`),
		}},
		"shopify": {"901", []string{"902", "903"}, []func(){
			shopifyOrder(901), shopify("subscription_contracts/create", "evt-contract-81", contract("active")),
			shopifyOrder(902), shopifyOrder(903),
			shopify("subscription_contracts/cancel", "evt-contract-81-cancel", contract("cancelled")),
		}},
	} {
		t.Run(name, func(t *testing.T) {
			last := len(l.deliver) - 1
			for _, deliver := range l.deliver[:last] {
				deliver()
			}
			settled(l.start, state.Fulfil) // granted before the end
			for _, r := range l.renewals {
				settled(r, state.Fulfil)
			}
			l.deliver[last]()
			l.deliver[last]() // the end, redelivered
			settled(l.start, state.Fulfil, state.Revoke)
			for _, r := range l.renewals {
				settled(r, state.Fulfil)
			}
		})
	}
}

// editedTestdata is a provider's sample event (app/provider/testdata),
// edited: edit gets its envelope and its data object.
func editedTestdata(t *testing.T, name string, edit func(env, data map[string]any)) []byte {
	t.Helper()
	raw, err := os.ReadFile("../app/provider/testdata/" + name)
	require.NoError(t, err)
	var env map[string]any
	require.NoError(t, json.Unmarshal(raw, &env))
	edit(env, env["data"].(map[string]any))
	out, err := json.Marshal(env)
	require.NoError(t, err)
	return out
}
