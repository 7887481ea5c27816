package web_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/actions"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/web"
)

// TestOperatorsSeeActions: the actions and routes read-only under the API,
// a payment's every action on its fulfilment's detail, and listings
// filtered by action.
func TestOperatorsSeeActions(t *testing.T) {
	t.Parallel()
	set := &actions.Set{Source: "routes.yaml", Digest: "d1",
		Actions: []actions.Action{
			{Name: "licence", TakeBack: actions.DefaultPolicy, Receiver: actions.Receiver{URL: "https://lms.example/g", SecretEnv: "LICENCE_SECRET", Secrets: []string{"whsec_never_shown"}, Timeout: time.Second}},
			{Name: "welcome_email", TakeBack: actions.Policy{}, Receiver: actions.Receiver{URL: "https://mail.example/g", Timeout: time.Second}},
		},
		Routes: []actions.Route{{Name: "all", Actions: []string{"licence", "welcome_email"}}},
	}
	b := setup(t, setupOpts{fulfilment: func(c *fulfilment.Config) {
		c.Actions, c.Performers = set, map[string]fulfilment.Performer{"licence": {Connector: c.Connector}, "welcome_email": {Connector: c.Connector}}
	}})
	require.Equal(t, http.StatusOK, b.postStripe(t, intentEvent("evt_1", "pi_1")).code)
	require.Eventually(t, func() bool {
		return b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE payment_id = 'pi_1' AND state = 'fulfilled'`) == 2
	}, 10*time.Second, 10*time.Millisecond)

	code, raw := b.api(t, "GET", "/api/v1/actions", b.token, nil)
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, string(raw), "whsec_never_shown")
	var a web.ActionsAnswer
	require.NoError(t, json.Unmarshal(raw, &a))
	require.Len(t, a.Actions, 2)
	require.Equal(t, "LICENCE_SECRET", a.Actions[0].SecretEnv)
	require.Empty(t, a.Actions[1].TakeBack)

	code, raw = b.api(t, "GET", "/api/v1/fulfilments?action=welcome_email", b.token, nil)
	require.Equal(t, http.StatusOK, code)
	var list web.FulfilmentList
	require.NoError(t, json.Unmarshal(raw, &list))
	require.Len(t, list.Fulfilments, 1)
	require.Equal(t, "welcome_email", list.Fulfilments[0].ActionName)
	code, _ = b.api(t, "GET", "/api/v1/fulfilments?action=Welcome!", b.token, nil)
	require.Equal(t, http.StatusBadRequest, code)

	code, raw = b.api(t, "GET", "/api/v1/fulfilments/"+list.Fulfilments[0].ID, b.token, nil)
	require.Equal(t, http.StatusOK, code)
	var d web.FulfilmentDetail
	require.NoError(t, json.Unmarshal(raw, &d))
	require.Equal(t, []string{"licence", "welcome_email"}, d.Purchase.Actions)
	require.Len(t, d.Purchase.Fulfilments, 2)
	for _, f := range d.Purchase.Fulfilments {
		require.Equal(t, state.Fulfilled, f.State)
	}
	fs, err := db.FulfilmentsByPayment(b.ctx, b.db.Pool, "stripe", "pi_1")
	require.NoError(t, err)
	require.Len(t, fs, 2)

	// The dashboard: the fulfilment page lists the purchase's actions with
	// their receivers; the list and the queue filter by action.
	op := newBrowser(t, b)
	code, _ = op.signIn(b.token)
	require.Equal(t, http.StatusSeeOther, code)
	code, body, _ := op.get("/fulfilments/" + list.Fulfilments[0].ID)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "The purchase's actions")
	require.Contains(t, body, "https://lms.example/g")
	require.Contains(t, body, "https://mail.example/g")
	code, body, _ = op.get("/fulfilments?action=licence")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 1, strings.Count(body, "<td>licence</td>"))
	require.NotContains(t, body, "<td>welcome_email</td>")
	code, body, _ = op.get("/queue?action=licence")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<option value="licence" selected>`)
}

// TestOperatorsSeePurchasesAwaitingTheirItems: a Checkout purchase whose
// routes match on products waits, visibly, while Stripe's API (a fake on
// loopback) fails to list its line items: under the API, in the stats, on
// the overview and the queue. Once the API answers, River's retry routes
// it and its action is performed once.
func TestOperatorsSeePurchasesAwaitingTheirItems(t *testing.T) {
	t.Parallel()
	var up atomic.Bool
	stripeAPI := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"message":"Stripe is unavailable","type":"api_error"}}`))
			return
		}
		_, _ = w.Write([]byte(`{"object":"list","has_more":false,"data":[{"id":"li_1","object":"item","quantity":1,"price":{"id":"price_c","object":"price","product":"prod_course"}}]}`))
	}))
	t.Cleanup(stripeAPI.Close)
	api, err := provider.NewStripeAPI("sk_test_web_items", stripeAPI.URL)
	require.NoError(t, err)
	set := &actions.Set{Source: "routes.yaml", Digest: "d1",
		Actions: []actions.Action{{Name: "licence", TakeBack: actions.DefaultPolicy, Receiver: actions.Receiver{Timeout: time.Second}}},
		Routes:  []actions.Route{{Name: "courses", Actions: []string{"licence"}, Match: actions.Match{Products: []string{"prod_course"}}}},
	}
	b := setup(t, setupOpts{fulfilment: func(c *fulfilment.Config) {
		c.Actions, c.Performers = set, map[string]fulfilment.Performer{"licence": {Connector: c.Connector}}
		c.Items = map[string]fulfilment.ItemsSource{"stripe": api}
	}})
	require.Equal(t, http.StatusOK, b.postStripe(t, intentEvent("evt_1", "pi_1")).code)

	var awaiting web.AwaitingAnswer
	require.Eventually(t, func() bool {
		code, raw := b.api(t, "GET", "/api/v1/purchases/awaiting", b.token, nil)
		require.Equal(t, http.StatusOK, code)
		require.NoError(t, json.Unmarshal(raw, &awaiting))
		return awaiting.Total == 1 && awaiting.Purchases[0].Attempts >= 1
	}, 10*time.Second, 20*time.Millisecond)
	p := awaiting.Purchases[0]
	require.Equal(t, "pi_1", p.PaymentID)
	require.Equal(t, "cs_evt_1", p.ItemsOf)
	require.Contains(t, p.LastError, "Stripe is unavailable")
	require.NotContains(t, p.LastError, "sk_test_web_items")
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE payment_id = 'pi_1'`), "nothing is made without the items")

	code, raw := b.api(t, "GET", "/api/v1/stats", b.token, nil)
	require.Equal(t, http.StatusOK, code)
	var st web.StatsAnswer
	require.NoError(t, json.Unmarshal(raw, &st))
	require.Equal(t, 1, st.AwaitingItems)
	require.NotNil(t, st.OldestAwaitingAge)

	op := newBrowser(t, b)
	code, _ = op.signIn(b.token)
	require.Equal(t, http.StatusSeeOther, code)
	code, body, _ := op.get("/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "1 purchase awaits its items")
	code, body, _ = op.get("/queue")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "<code>cs_evt_1</code>")
	require.Contains(t, body, "Stripe is unavailable")

	up.Store(true)
	require.Eventually(t, func() bool {
		return b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE payment_id = 'pi_1' AND action_name = 'licence' AND state = 'fulfilled'`) == 1
	}, 20*time.Second, 20*time.Millisecond, "River's retry routes the purchase once the API answers")
	code, raw = b.api(t, "GET", "/api/v1/purchases/awaiting", b.token, nil)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"total":0,"purchases":[]}`, string(raw))
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE payment_id = 'pi_1'`))
}
