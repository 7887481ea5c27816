package e2e

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/db/dbtest"
)

// callsFor counts the connector calls made for one payment, every key.
func (c *fakeConnector) callsFor(paymentID string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for key, body := range c.payment {
		var req struct {
			PaymentID string `json:"payment_id"`
		}
		if json.Unmarshal([]byte(body), &req) == nil && req.PaymentID == paymentID {
			n += c.calls[key]
		}
	}
	return n
}

// stripeEvent is a Stripe event as the API version Stripe sends today
// (2025-03-31 and later) shapes it, with only the fields the rules read.
func stripeEvent(id, typ string, object map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"id": id, "object": "event", "api_version": "2025-03-31.basil", "type": typ,
		"data": map[string]any{"object": object}})
	return b
}

// TestPurchasesFulfilAsStripeSaysTheyArePaid delivers the events of one
// purchase of each kind Checkout makes to the built binary, every event
// twice and in a shuffled order, and counts the connector's calls per
// purchase (docs/design.md, "What a Stripe payment is").
func TestPurchasesFulfilAsStripeSaysTheyArePaid(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	conn := newFakeConnector(t)
	g := start(t, baseEnv(t, d, conn))
	send := func(events ...[]byte) {
		var all [][]byte
		for _, e := range events {
			all = append(all, e, e)
		}
		rand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		for _, body := range all {
			require.Equal(t, http.StatusOK, g.post(t, "/webhooks/stripe", providertest.SignStripe(body, stripeSecret, time.Now()), body),
				"every well-signed event is acknowledged: %s", body)
		}
	}
	session := func(id, mode, status string, pi any) map[string]any {
		return map[string]any{"id": id, "object": "checkout.session", "mode": mode, "status": "complete", "payment_status": status, "payment_intent": pi}
	}
	intent := func(id string) map[string]any {
		return map[string]any{"id": id, "object": "payment_intent", "status": "succeeded"}
	}
	// settle waits until nothing is pending or dispatching.
	settle := func() {
		require.Eventually(t, func() bool {
			return d.Count(t, `SELECT count(*) FROM fulfilment WHERE state IN ('pending', 'dispatching')`) == 0
		}, 15*time.Second, 20*time.Millisecond)
	}

	// Card: the session is paid at completion; its payment intent's event
	// arrives too, in any order.
	send(stripeEvent("evt_card_cs", "checkout.session.completed", session("cs_card", "payment", "paid", "pi_card")),
		stripeEvent("evt_card_pi", "payment_intent.succeeded", intent("pi_card")))

	// Free: nothing to pay, no payment intent.
	send(stripeEvent("evt_free_cs", "checkout.session.completed", session("cs_free", "payment", "no_payment_required", nil)))

	// Subscription, first payment: the session has no payment intent; the
	// first invoice and its payment intent (which names no invoice since
	// 2025-03-31) arrive too.
	send(stripeEvent("evt_sub_cs", "checkout.session.completed", map[string]any{"id": "cs_sub", "object": "checkout.session",
		"mode": "subscription", "status": "complete", "payment_status": "paid", "payment_intent": nil, "subscription": "sub_1", "invoice": "in_first"}),
		stripeEvent("evt_sub_in", "invoice.paid", map[string]any{"id": "in_first", "object": "invoice", "status": "paid",
			"billing_reason": "subscription_create", "parent": map[string]any{"subscription_details": map[string]any{"subscription": "sub_1"}}}),
		stripeEvent("evt_sub_pi", "payment_intent.succeeded", intent("pi_sub_first")))

	// Delayed payment that succeeds: completed unpaid first; nothing may
	// reach the connector until the money arrives.
	delayed := session("cs_late", "payment", "unpaid", "pi_late")
	send(stripeEvent("evt_late_cs", "checkout.session.completed", delayed))
	// Delayed payment that fails: completed unpaid, then failed, then the
	// stale completed again.
	failed := session("cs_fail", "payment", "unpaid", "pi_fail")
	send(stripeEvent("evt_fail_cs", "checkout.session.completed", failed),
		stripeEvent("evt_fail_async", "checkout.session.async_payment_failed", failed))
	settle()
	require.Equal(t, 1, conn.callsFor("pi_card"), "card")
	require.Equal(t, 1, conn.callsFor("cs_free"), "free")
	require.Equal(t, 1, conn.callsFor("cs_sub"), "subscription")
	require.Zero(t, conn.callsFor("in_first")+conn.callsFor("pi_sub_first"), "the subscription's first invoice and payment are the same purchase")
	require.Zero(t, conn.callsFor("pi_late"), "delayed: nothing before the money arrives")
	require.Zero(t, conn.callsFor("pi_fail"), "delayed and failed")

	// The delayed payment succeeds: its success (and its payment intent's)
	// arrive, twice, shuffled, with the stale completed once more.
	paidLate := session("cs_late", "payment", "paid", "pi_late")
	send(stripeEvent("evt_late_async", "checkout.session.async_payment_succeeded", paidLate),
		stripeEvent("evt_late_pi", "payment_intent.succeeded", intent("pi_late")),
		stripeEvent("evt_late_cs", "checkout.session.completed", delayed))
	settle()
	require.Equal(t, 1, conn.callsFor("pi_late"), "delayed: once after the success")
	require.Zero(t, conn.callsFor("pi_fail"))
	total := 0
	for _, n := range conn.snapshot() {
		total += n
	}
	require.Equal(t, 4, total, "no call for anything unpaid")
	require.Equal(t, 11, d.Count(t, `SELECT count(*) FROM webhook_event`), "every distinct event stored once")
	require.True(t, strings.Contains(g.logs(), "waits for checkout.session.async_payment_succeeded"), "the wait is logged")
}
