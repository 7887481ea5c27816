package fulfilment_test

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/lock"
	"github.com/guardian-pay/guardian/app/metrics"
	"github.com/guardian-pay/guardian/app/metrics/metricstest"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

// A subscription's life as Stripe tells it, on the course platform: its
// start (a subscription-mode Checkout Session, paid), a cancellation at
// the period's end (no end yet), and its end, told twice (the deletion,
// and an update whose status says canceled).
func subStart(n int) provider.Event {
	ev := purchase(fmt.Sprintf("evt_start_%d", n), fmt.Sprintf("cs_sub_%d", n), map[string]string{"course": "go"})
	ev.Subscription = fmt.Sprintf("sub_%d", n)
	ev.Purchase.Kind = provider.SubscriptionStart
	return ev
}

func subCancelAtPeriodEnd(n int) provider.Event {
	return provider.Event{Provider: "stripe", ID: fmt.Sprintf("evt_cancel_%d", n), Type: "customer.subscription.updated", Payload: []byte(`{}`),
		Note: "subscription cancelled at the end of its period: it ends then, not now"}
}

func subEnd(n int, typ string) provider.Event {
	return provider.Event{Provider: "stripe", ID: fmt.Sprintf("evt_%s_%d", typ, n), Type: typ, Payload: []byte(`{}`),
		Reversal: &provider.Reversal{Kind: provider.End, Subscription: fmt.Sprintf("sub_%d", n)}}
}

// settleAll dispatches every pending row of the Stripe payment, as workers
// would, answering done.
func (b *testBundle) settleAll(t *testing.T, paymentID string) {
	t.Helper()
	b.settleAllOf(t, "stripe", paymentID)
}

// settleAllOf is settleAll for a payment of another provider's.
func (b *testBundle) settleAllOf(t *testing.T, provider, paymentID string) {
	t.Helper()
	fs, err := db.FulfilmentsByPayment(b.ctx, b.db.Pool, provider, paymentID)
	require.NoError(t, err)
	for _, f := range fs {
		if f.State == state.Pending {
			_, err := b.dispatch(t, f.ID)
			require.NoError(t, err)
		}
	}
}

// ledger counts, by action and direction, the rows of a Stripe payment
// that reached fulfilled: what the receivers did.
func (b *testBundle) ledger(t *testing.T, paymentID string) map[string]int {
	t.Helper()
	return b.ledgerOf(t, "stripe", paymentID)
}

// ledgerOf is ledger for a payment of another provider's.
func (b *testBundle) ledgerOf(t *testing.T, provider, paymentID string) map[string]int {
	t.Helper()
	fs, err := db.FulfilmentsByPayment(b.ctx, b.db.Pool, provider, paymentID)
	require.NoError(t, err)
	out := map[string]int{}
	for _, f := range fs {
		if f.State == state.Fulfilled {
			out[f.ActionName+" "+string(f.Action)]++
		}
	}
	return out
}

func TestSubscriptions(t *testing.T) {
	t.Parallel()

	t.Run("AnEndTakesBackWhatTheStartGrantedOnceByPolicy", func(t *testing.T) {
		t.Parallel()
		cp := newCoursePlatform("routes.yaml")
		reg := prometheus.NewRegistry()
		m, err := metrics.New(reg, nil, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		b := setup(t, cp.option, func(c *fulfilment.Config) { c.Metrics = m })
		_, err = b.svc.Accept(b.ctx, subStart(1))
		require.NoError(t, err)
		b.settleAll(t, "cs_sub_1")
		_, err = b.svc.Accept(b.ctx, subCancelAtPeriodEnd(1))
		require.NoError(t, err)
		require.Empty(t, b.byAction(t, "cs_sub_1", state.Revoke), "a cancellation at the period's end keeps access until then")
		for _, typ := range []string{"customer.subscription.deleted", "customer.subscription.updated"} {
			_, err = b.svc.Accept(b.ctx, subEnd(1, typ))
			require.NoError(t, err)
			b.settleAll(t, "cs_sub_1")
		}
		require.Equal(t, map[string]int{"licence fulfil": 1, "licence revoke": 1, "welcome_email fulfil": 1}, b.ledger(t, "cs_sub_1"),
			"the licence (default policy) is taken back once for two ends; the email (none) never")
		require.Len(t, cp.receivers["licence"].Calls(), 2)
		require.Equal(t, state.Revoke, cp.receivers["licence"].Calls()[1].Action)
		count := func(event string) float64 {
			return metricstest.Value(t, reg, "guardian_subscription_events_total", map[string]string{"provider": "stripe", "event": event})
		}
		require.Equal(t, 1.0, count("start"))
		require.Equal(t, 2.0, count("end"), "each end stored is counted; one took back")

		sub, err := db.GetSubscription(b.ctx, b.db.Pool, "stripe", "sub_1")
		require.NoError(t, err)
		require.Equal(t, "ended", sub.State())
		require.Equal(t, "cs_sub_1", sub.PaymentID)
		events, err := db.SubscriptionEvents(b.ctx, b.db.Pool, sub)
		require.NoError(t, err)
		require.Len(t, events, 3, "its start and its two ends")
	})

	t.Run("InEveryOrderNoAccessOutlivesTheEnd", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newCoursePlatform("routes.yaml").option)
		perms := permutations([]string{"start", "cancel", "deleted", "updated"})
		for n, order := range perms {
			payment := fmt.Sprintf("cs_sub_%d", n)
			for _, step := range order {
				ev := map[string]provider.Event{"start": subStart(n), "cancel": subCancelAtPeriodEnd(n),
					"deleted": subEnd(n, "customer.subscription.deleted"), "updated": subEnd(n, "customer.subscription.updated")}[step]
				_, err := b.svc.Accept(b.ctx, ev)
				require.NoError(t, err)
				b.settleAll(t, payment)
			}
			got := b.ledger(t, payment)
			startFirst := order[0] == "start" || (order[0] == "cancel" && order[1] == "start")
			if startFirst {
				require.Equal(t, map[string]int{"licence fulfil": 1, "licence revoke": 1, "welcome_email fulfil": 1}, got, "%v", order)
			} else {
				// An end before the start: the licence is never granted
				// (its policy takes it back at the end, and no lookup can
				// say a restored database forgot a grant); the welcome
				// email, which no end takes back, goes out for the period
				// that was paid.
				require.Equal(t, map[string]int{"welcome_email fulfil": 1}, got, "%v", order)
			}
			require.NotEqual(t, state.Pending, b.byAction(t, payment, state.Fulfil)["licence"].State, "%v: no grant left to go out", order)
		}
		require.Len(t, perms, 24)
	})

	t.Run("ALinkFromAnEventThatDoesNotPay", func(t *testing.T) {
		t.Parallel()
		// Paddle's subscription.created names the transaction that created
		// the subscription; the transaction's own event may name it or not.
		b := setup(t, newCoursePlatform("routes.yaml").option)
		created := func(n int) provider.Event {
			return provider.Event{Provider: "stripe", ID: fmt.Sprintf("evt_created_%d", n), Type: "subscription.created", Payload: []byte(`{}`),
				Subscription: fmt.Sprintf("sub_%d", n), SubscriptionPurchase: fmt.Sprintf("cs_sub_%d", n)}
		}
		paid := func(n int) provider.Event {
			ev := subStart(n)
			ev.Subscription = "" // the transaction does not say
			return ev
		}
		end := func(n int) provider.Event { return subEnd(n, "customer.subscription.deleted") }
		for n, order := range [][]provider.Event{
			{paid(0), created(0), end(0)},
			{created(1), paid(1), end(1)},
			{end(2), created(2), paid(2)},
			{created(3), end(3), paid(3)},
			{paid(4), end(4), created(4)},
		} {
			payment := fmt.Sprintf("cs_sub_%d", n)
			for _, ev := range order {
				_, err := b.svc.Accept(b.ctx, ev)
				require.NoError(t, err)
				b.settleAll(t, payment)
			}
			got := b.ledger(t, payment)
			require.Equal(t, got["licence fulfil"], got["licence revoke"], "case %d: no access outlives the end: %v", n, got)
			if n <= 1 {
				require.Equal(t, 1, got["licence fulfil"], "case %d: granted, then taken back", n)
			}
		}
	})

	t.Run("StartAndEndAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newCoursePlatform("routes.yaml").option)
		b.atOnce(t, 20, func(n int) []provider.Event {
			return []provider.Event{subStart(n), subEnd(n, "customer.subscription.deleted")}
		}, func(n int) string { return fmt.Sprintf("cs_sub_%d", n) })
		for n := range 20 {
			payment := fmt.Sprintf("cs_sub_%d", n)
			got := b.ledger(t, payment)
			require.Equal(t, got["licence fulfil"], got["licence revoke"], "%s: a licence granted is taken back: %v", payment, got)
			require.LessOrEqual(t, got["licence fulfil"], 1)
			rows := b.byAction(t, payment, state.Fulfil)
			require.NotEqual(t, state.Pending, rows["licence"].State, "%s: no grant left to go out after the end", payment)
		}
	})
}

// atOnce delivers each of n purchases' events all at once, alternating
// between b's service and a second process's, then settles every
// purchase (paymentOf names each), runs the sweep that takes back what
// settled fulfilled after its reversal, and settles again.
func (b *testBundle) atOnce(t *testing.T, n int, events func(int) []provider.Event, paymentOf func(int) string) {
	t.Helper()
	other, err := fulfilment.New(b.cfg)
	require.NoError(t, err)
	var wg sync.WaitGroup
	begin := make(chan struct{})
	for i := range n {
		for j, ev := range events(i) {
			svc := []*fulfilment.Service{b.svc, other}[(i+j)%2]
			wg.Go(func() {
				<-begin
				if _, err := svc.Accept(b.ctx, ev); err != nil {
					t.Error(err)
				}
			})
		}
	}
	close(begin)
	wg.Wait()
	for i := range n {
		b.settleAll(t, paymentOf(i))
	}
	_, err = b.svc.TakeBackReversed(b.ctx, "test sweeper", lock.Lease{Name: "guardian_sweep_reversed", Fence: 1})
	require.NoError(t, err)
	for i := range n {
		b.settleAll(t, paymentOf(i))
	}
}

// permutations lists every order of items.
func permutations(items []string) [][]string {
	if len(items) <= 1 {
		return [][]string{append([]string(nil), items...)}
	}
	var out [][]string
	for i, first := range items {
		rest := append(append([]string(nil), items[:i]...), items[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]string{first}, p...))
		}
	}
	return out
}

// TestLinkStoredSubscriptions: a subscription started before links were
// recorded has none, and its end takes nothing back; an operator's link
// reads the stored start again by Stripe's rules, links it, resolves the
// stored end and takes the grant back, once.
func TestLinkStoredSubscriptions(t *testing.T) {
	t.Parallel()
	stripe, err := provider.NewStripe(provider.StripeConfig{Secrets: []string{"whsec_link_stored_0123456789abcdef"}})
	require.NoError(t, err)
	b := setup(t, newCoursePlatform("routes.yaml").option, func(c *fulfilment.Config) {
		c.Mappers = map[string]provider.Mapper{"stripe": stripe}
	})
	read := func(body string) provider.Event {
		ev, err := stripe.Read([]byte(body))
		require.NoError(t, err)
		return ev
	}
	_, err = b.svc.Accept(b.ctx, read(`{"id":"evt_old_start","object":"event","type":"checkout.session.completed","data":{"object":{"id":"cs_old","object":"checkout.session","mode":"subscription","payment_status":"paid","payment_intent":null,"subscription":"sub_old","metadata":{"course":"go"}}}}`))
	require.NoError(t, err)
	b.settleAll(t, "cs_old")
	_, err = b.db.Pool.Exec(b.ctx, `DELETE FROM subscription`) // as before links were recorded
	require.NoError(t, err)
	_, err = b.svc.Accept(b.ctx, read(`{"id":"evt_old_end","object":"event","type":"customer.subscription.deleted","data":{"object":{"id":"sub_old","object":"subscription","status":"canceled"}}}`))
	require.NoError(t, err)
	b.settleAll(t, "cs_old")
	require.Equal(t, map[string]int{"licence fulfil": 1, "welcome_email fulfil": 1}, b.ledger(t, "cs_old"), "no link: the end takes nothing back")
	waiting, err := db.CountEndsAwaitingStart(b.ctx, b.db.Pool)
	require.NoError(t, err)
	require.Equal(t, 1, waiting)

	window := fulfilment.LinkParams{Operator: "ana", Since: time.Now().Add(-time.Hour)}
	dry := window
	dry.DryRun = true
	res, err := b.svc.LinkStored(b.ctx, dry)
	require.NoError(t, err)
	require.Equal(t, fulfilment.LinkResult{Naming: 1, Linked: 1}, res)
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM subscription`), "a dry run links nothing")

	res, err = b.svc.LinkStored(b.ctx, window)
	require.NoError(t, err)
	require.Equal(t, fulfilment.LinkResult{Naming: 1, Linked: 1, Ended: 1}, res)
	b.settleAll(t, "cs_old")
	require.Equal(t, map[string]int{"licence fulfil": 1, "licence revoke": 1, "welcome_email fulfil": 1}, b.ledger(t, "cs_old"))
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment_transition t JOIN fulfilment f ON f.id = t.fulfilment_id
		WHERE f.payment_id = 'cs_old' AND f.action = 'revoke' AND t.actor = 'operator ana'`), "audited under the operator's name")

	res, err = b.svc.LinkStored(b.ctx, window)
	require.NoError(t, err)
	require.Equal(t, fulfilment.LinkResult{}, res, "linked once")
	b.settleAll(t, "cs_old")
	require.Equal(t, 1, b.ledger(t, "cs_old")["licence revoke"])
}

// TestReplayLinksItsSubscription: replaying a subscription's stored start
// links it as intake does, so an end stored before takes back what it
// granted, once.
func TestReplayLinksItsSubscription(t *testing.T) {
	t.Parallel()
	stripe, err := provider.NewStripe(provider.StripeConfig{Secrets: []string{"whsec_replay_links_0123456789abcdef"}})
	require.NoError(t, err)
	b := setup(t, newCoursePlatform("routes.yaml").option, func(c *fulfilment.Config) {
		c.Mappers = map[string]provider.Mapper{"stripe": stripe}
	})
	for _, body := range []string{
		`{"id":"evt_r_start","object":"event","type":"checkout.session.completed","data":{"object":{"id":"cs_r","object":"checkout.session","mode":"subscription","payment_status":"paid","payment_intent":null,"subscription":"sub_r","metadata":{"course":"go"}}}}`,
		`{"id":"evt_r_end","object":"event","type":"customer.subscription.deleted","data":{"object":{"id":"sub_r","object":"subscription","status":"canceled"}}}`,
	} {
		ev, err := stripe.Read([]byte(body))
		require.NoError(t, err)
		_, err = b.svc.Accept(b.ctx, ev)
		require.NoError(t, err)
		b.settleAll(t, "cs_r")
		if ev.Subscription != "" {
			_, err = b.db.Pool.Exec(b.ctx, `DELETE FROM subscription`) // recorded before links were
			require.NoError(t, err)
		}
	}
	require.Zero(t, b.ledger(t, "cs_r")["licence revoke"], "no link: the end took nothing back")
	for range 2 {
		_, err = b.svc.Replay(b.ctx, "stripe", "evt_r_start", "ana")
		require.NoError(t, err)
		b.settleAll(t, "cs_r")
	}
	require.Equal(t, map[string]int{"licence fulfil": 1, "licence revoke": 1, "welcome_email fulfil": 1}, b.ledger(t, "cs_r"))
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM subscription WHERE subscription_id = 'sub_r' AND payment_id = 'cs_r'`))
}
