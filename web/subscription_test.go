package web_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/state"
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
}
