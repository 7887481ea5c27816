package fulfilment_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/actions"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/lock"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

// items is a provider's API that lists what a Checkout Session sold: by
// session, or an error while down. (provider.StripeAPI is tested against
// Stripe's fixture in app/provider; here the domain's use of any source.)
type items struct {
	sold  map[string][]provider.Item
	down  atomic.Bool
	calls atomic.Int64
}

func (s *items) Items(_ context.Context, ref string) ([]provider.Item, error) {
	s.calls.Add(1)
	if s.down.Load() {
		return nil, errors.New("stripe answered 500: the API is having a moment")
	}
	return s.sold[ref], nil
}

// shop is a course platform that routes by product: a course pays for a
// licence and a welcome email, a team seat for a CRM contact too. Its
// Checkout purchases name what was sold only through the API.
func shop(source *items) (coursePlatform, func(*fulfilment.Config)) {
	cp := newCoursePlatform("routes.yaml")
	cp.set.Routes = []actions.Route{
		{Name: "courses", Actions: []string{"licence", "welcome_email"}, Match: actions.Match{Products: []string{"prod_course", "prod_team"}}},
		{Name: "teams", Actions: []string{"crm_contact"}, Match: actions.Match{Products: []string{"prod_team"}}},
	}
	return cp, func(c *fulfilment.Config) {
		cp.option(c)
		if source != nil {
			c.Items = map[string]fulfilment.ItemsSource{"stripe": source}
		}
	}
}

// checkout is a paid Checkout Session's event: it names the session and
// nothing it sold.
func checkout(eventID, typ, paymentID, session string) provider.Event {
	ev := purchase(eventID, paymentID, nil)
	ev.Type, ev.ItemsRef = typ, session
	return ev
}

func team(session string) *items {
	one := int64(1)
	return &items{sold: map[string][]provider.Item{session: {{Product: "prod_team", Price: "price_team", Quantity: &one}}}}
}

// awaitingShop sets up the shop on source and records the Checkout
// purchase pi_1 of session cs_1, awaiting its items.
func awaitingShop(t *testing.T, source *items) *testBundle {
	t.Helper()
	_, option := shop(source)
	b := setup(t, option)
	_, err := b.svc.Accept(b.ctx, checkout("evt_1", "checkout.session.completed", "pi_1", "cs_1"))
	require.NoError(t, err)
	return b
}

// awaiting is what the database says awaits its items.
func (b *testBundle) awaiting(t *testing.T) []db.AwaitingPurchase {
	t.Helper()
	list, total, err := db.PurchasesAwaiting(b.ctx, b.db.Pool, 10)
	require.NoError(t, err)
	require.Len(t, list, total)
	return list
}

func TestPurchasesAwaitingTheirItems(t *testing.T) {
	t.Parallel()
	pay := db.Payment{Provider: "stripe", PaymentID: "pi_1"}

	t.Run("RoutedOnceTheItemsComeAndNoEventAddsAnything", func(t *testing.T) {
		t.Parallel()
		source := team("cs_1")
		cp, option := shop(source)
		b := setup(t, option)
		res, err := b.svc.Accept(b.ctx, checkout("evt_1", "checkout.session.completed", "pi_1", "cs_1"))
		require.NoError(t, err)
		require.Empty(t, res.Created, "nothing is decided before the items are known")
		require.Equal(t, []db.Payment{pay}, b.enqueuer.routes, "the fetch is enqueued with the purchase")
		// A redelivery, and the purchase's other paid event, add nothing
		// and ask for no second fetch.
		for _, ev := range []provider.Event{
			checkout("evt_1", "checkout.session.completed", "pi_1", "cs_1"),
			checkout("evt_2", "checkout.session.async_payment_succeeded", "pi_1", "cs_1"),
		} {
			res, err := b.svc.Accept(b.ctx, ev)
			require.NoError(t, err)
			require.Empty(t, res.Created)
		}
		require.Len(t, b.enqueuer.routes, 1)
		require.Empty(t, b.byAction(t, "pi_1", state.Fulfil))
		list := b.awaiting(t)
		require.Len(t, list, 1)
		require.Equal(t, "cs_1", list[0].Ref)
		require.Zero(t, source.calls.Load(), "intake never calls the provider")

		born, err := b.svc.RouteAwaiting(b.ctx, pay, "test router")
		require.NoError(t, err)
		require.Len(t, born, 3)
		rows := b.byAction(t, "pi_1", state.Fulfil)
		require.Equal(t, []string{"crm_contact", "licence", "welcome_email"}, names(rows), "the team seat's routes, each action once")
		require.Empty(t, b.awaiting(t))
		for _, f := range rows {
			require.Equal(t, state.Pending, f.State)
			require.Equal(t, 1, b.enqueuer.count(t, f.ID), "each row's dispatch job, in the routing's transaction")
			_, err := b.dispatch(t, f.ID)
			require.NoError(t, err)
		}
		for _, r := range cp.receivers {
			require.Len(t, r.Calls(), 1)
			var sent provider.Purchase
			require.NoError(t, json.Unmarshal(r.Calls()[0].Purchase, &sent))
			require.Equal(t, source.sold["cs_1"], sent.Items, "receivers are sent the purchase with the items its routes read")
			require.Equal(t, "pi_1", sent.ID)
		}

		again, err := b.svc.RouteAwaiting(b.ctx, pay, "test router")
		require.NoError(t, err)
		require.Empty(t, again, "a routed purchase is not routed again")
		require.EqualValues(t, 1, source.calls.Load(), "nor fetched again")
		res, err = b.svc.Accept(b.ctx, checkout("evt_3", "checkout.session.async_payment_succeeded", "pi_1", "cs_1"))
		require.NoError(t, err)
		require.Empty(t, res.Created)
	})

	t.Run("AFailedFetchLeavesThePurchaseAwaitingVisiblyUntilOneSucceeds", func(t *testing.T) {
		t.Parallel()
		source := team("cs_1")
		source.down.Store(true)
		b := awaitingShop(t, source)
		for range 2 {
			born, err := b.svc.RouteAwaiting(b.ctx, pay, "test router")
			require.ErrorContains(t, err, "the API is having a moment", "the job is told to try again")
			require.Empty(t, born)
		}
		list := b.awaiting(t)
		require.Len(t, list, 1)
		require.Equal(t, 2, list[0].Attempts)
		require.Contains(t, list[0].Error, "stripe answered 500")
		require.NotNil(t, list[0].TriedAt)
		require.Empty(t, b.byAction(t, "pi_1", state.Fulfil), "nothing is guessed without the items")
		st, err := db.GetStats(b.ctx, b.db.Pool)
		require.NoError(t, err)
		require.Equal(t, 1, st.AwaitingItems)
		require.NotNil(t, st.OldestAwaiting)

		source.down.Store(false)
		born, err := b.svc.RouteAwaiting(b.ctx, pay, "test router")
		require.NoError(t, err)
		require.Len(t, born, 3)
		require.Empty(t, b.awaiting(t))
	})

	t.Run("RoutersAtOnceRouteOnce", func(t *testing.T) {
		t.Parallel()
		source := team("cs_1")
		b := awaitingShop(t, source)
		other, err := fulfilment.New(b.cfg) // a second process
		require.NoError(t, err)
		var made atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 8 {
			svc := []*fulfilment.Service{b.svc, other}[i%2]
			wg.Go(func() {
				<-start
				born, err := svc.RouteAwaiting(b.ctx, pay, "test router")
				if err != nil {
					t.Error(err)
				}
				made.Add(int64(len(born)))
			})
		}
		close(start)
		wg.Wait()
		require.EqualValues(t, 3, made.Load(), "the purchase's actions are made once, by one router")
		require.Len(t, b.byAction(t, "pi_1", state.Fulfil), 3)
	})

	t.Run("AReversalWhileAwaitingIsHonouredWhenTheActionsAreMade", func(t *testing.T) {
		t.Parallel()
		b := awaitingShop(t, team("cs_1"))
		_, err := b.svc.Accept(b.ctx, refund("evt_refund", "pi_1", true))
		require.NoError(t, err)
		_, err = b.svc.RouteAwaiting(b.ctx, pay, "test router")
		require.NoError(t, err)
		rows := b.byAction(t, "pi_1", state.Fulfil)
		// The licence (taken back for a refund) and the CRM contact (for
		// any refund) have no lookup to ask: none is made. The welcome
		// email is never taken back: it goes out, as it would have had
		// the refund come after.
		require.Equal(t, []string{"welcome_email"}, names(rows))
		require.Equal(t, state.Pending, rows["welcome_email"].State)
	})

	t.Run("AnApplyWaitsForTheRouting", func(t *testing.T) {
		t.Parallel()
		source := team("cs_1")
		source.down.Store(true)
		b := awaitingShop(t, source)
		res, err := b.svc.ApplyAction(b.ctx, fulfilment.ApplyParams{Action: "crm_contact", Since: time.Now().Add(-time.Hour), Until: time.Now().Add(time.Hour), Operator: "ops"})
		require.NoError(t, err)
		require.Zero(t, res.Applied, "a purchase awaiting its items is decided by its routing, not by an apply")
		require.Empty(t, b.byAction(t, "pi_1", state.Fulfil))
	})

	t.Run("WithoutRoutesOnItemsOrWithoutASourceTheEventDecides", func(t *testing.T) {
		t.Parallel()
		// Routes on metadata only: nothing to fetch.
		source := team("cs_1")
		b := setup(t, newCoursePlatform("routes.yaml").option, func(c *fulfilment.Config) {
			c.Items = map[string]fulfilment.ItemsSource{"stripe": source}
		})
		ev := checkout("evt_1", "checkout.session.completed", "pi_1", "cs_1")
		ev.Purchase.Metadata = map[string]string{"course": "go"}
		res, err := b.svc.Accept(b.ctx, ev)
		require.NoError(t, err)
		require.Len(t, res.Created, 2)
		require.Empty(t, b.enqueuer.routes)

		// A node without the API key (a rollout, or none configured)
		// routes on what the event says: routes on products match
		// nothing of it, and the purchase is decided, once, for good.
		_, option := shop(nil)
		b = setup(t, option)
		res, err = b.svc.Accept(b.ctx, checkout("evt_1", "checkout.session.completed", "pi_1", "cs_1"))
		require.NoError(t, err)
		require.Empty(t, res.Created)
		require.Empty(t, b.enqueuer.routes)
		require.Empty(t, b.awaiting(t))
		require.Zero(t, source.calls.Load())
	})

	t.Run("TheSweepAsksAgainForAPurchaseNoFetchTried", func(t *testing.T) {
		t.Parallel()
		b := awaitingShop(t, team("cs_1"))
		sweep := func() int {
			n, err := b.svc.RequeueAwaiting(b.ctx, lock.Lease{Name: "guardian_sweep_awaiting", Fence: 1})
			require.NoError(t, err)
			return n
		}
		require.Zero(t, sweep(), "a fresh purchase has its job")
		_, err := b.db.Pool.Exec(b.ctx, `UPDATE purchase SET routed_at = now() - interval '11 minutes'`)
		require.NoError(t, err)
		require.Equal(t, 1, sweep())
		require.Equal(t, []db.Payment{pay, pay}, b.enqueuer.routes)
	})
}
