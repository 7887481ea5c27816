package fulfilment_test

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/actions"
	"github.com/guardian-pay/guardian/app/connector/connectortest"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/metrics"
	"github.com/guardian-pay/guardian/app/metrics/metricstest"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

// coursePlatform is the docs' course platform: every course pays for a
// licence (taken back by the deployment's policy) and a welcome email
// (never taken back); a team plan pays for a CRM contact too, taken back
// for any refund. Each action has its own recording receiver.
type coursePlatform struct {
	set       *actions.Set
	receivers map[string]*connectortest.Recorder
}

func newCoursePlatform(source string) coursePlatform {
	cp := coursePlatform{receivers: map[string]*connectortest.Recorder{}}
	cp.set = &actions.Set{
		Source: source, Digest: "test-" + source,
		Actions: []actions.Action{
			{Name: "licence", TakeBack: actions.DefaultPolicy},
			{Name: "welcome_email", TakeBack: actions.Policy{}},
			{Name: "crm_contact", TakeBack: actions.Policy{actions.AnyRefund}},
		},
		Routes: []actions.Route{
			{Name: "courses", Actions: []string{"licence", "welcome_email"}, Match: actions.Match{Present: []string{"course"}}},
			{Name: "teams", Actions: []string{"crm_contact", "licence"}, Match: actions.Match{Metadata: map[string]string{"plan": "team"}}},
		},
	}
	for _, a := range cp.set.Actions {
		cp.receivers[a.Name] = &connectortest.Recorder{}
	}
	return cp
}

// option configures a Service with cp's actions.
func (cp coursePlatform) option(c *fulfilment.Config) {
	c.Actions, c.Performers = cp.set, map[string]fulfilment.Performer{}
	for name, r := range cp.receivers {
		c.Performers[name] = fulfilment.Performer{Connector: r}
	}
}

// teamCourse sets up a Service on cp and pays for a team's course, cs_1:
// every action of cp; it returns the purchase's rows by action.
func (cp coursePlatform) teamCourse(t *testing.T, opts ...func(*fulfilment.Config)) (*testBundle, map[string]db.Fulfilment) {
	t.Helper()
	b := setup(t, append([]func(*fulfilment.Config){cp.option}, opts...)...)
	_, err := b.svc.Accept(b.ctx, purchase("evt_1", "cs_1", map[string]string{"course": "go", "plan": "team"}))
	require.NoError(t, err)
	return b, b.byAction(t, "cs_1", state.Fulfil)
}

// purchase is a paid Stripe event of a purchase with metadata.
func purchase(eventID, paymentID string, metadata map[string]string) provider.Event {
	return provider.Event{
		Provider: "stripe", ID: eventID, Type: "checkout.session.completed", PaymentID: paymentID, Payload: []byte(`{}`),
		Paid:     &provider.Money{Minor: 5000, Currency: "EUR"},
		Purchase: &provider.Purchase{Provider: "stripe", ID: paymentID, Kind: provider.OneTime, Metadata: metadata},
	}
}

// refund is a Stripe refund of paymentID, whole or partial.
func refund(eventID, paymentID string, full bool) provider.Event {
	return provider.Event{Provider: "stripe", ID: eventID, Type: "charge.refunded", Payload: []byte(`{}`),
		Reversal: &provider.Reversal{PaymentID: paymentID, Kind: provider.Refund, Full: full}}
}

// byAction is a payment's live rows (all but failed) of one direction, by
// action name.
func (b *testBundle) byAction(t *testing.T, paymentID string, dir state.Action) map[string]db.Fulfilment {
	t.Helper()
	fs, err := db.FulfilmentsByPayment(b.ctx, b.db.Pool, "stripe", paymentID)
	require.NoError(t, err)
	out := map[string]db.Fulfilment{}
	for _, f := range fs {
		if f.Action == dir && f.State != state.Failed {
			_, dup := out[f.ActionName]
			require.False(t, dup, "two live rows of %s for %s", f.ActionName, paymentID)
			out[f.ActionName] = f
		}
	}
	return out
}

// names are m's keys, sorted.
func names[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestActions(t *testing.T) {
	t.Parallel()

	t.Run("APurchaseOfTwoRoutesPaysForTheirUnionOnceEach", func(t *testing.T) {
		t.Parallel()
		cp := newCoursePlatform("routes.yaml")
		b := setup(t, cp.option)
		res, err := b.svc.Accept(b.ctx, purchase("evt_1", "cs_team", map[string]string{"course": "go", "plan": "team"}))
		require.NoError(t, err)
		require.Len(t, res.Created, 3, "licence named by both routes is one action")
		rows := b.byAction(t, "cs_team", state.Fulfil)
		require.Equal(t, []string{"crm_contact", "licence", "welcome_email"}, names(rows))
		keys := map[string]bool{}
		for _, f := range rows {
			keys[f.Key] = true
		}
		require.Len(t, keys, 3, "each action its own key")
		for _, f := range rows {
			_, err := b.dispatch(t, f.ID)
			require.NoError(t, err)
		}
		for name, r := range cp.receivers {
			calls := r.Calls()
			require.Len(t, calls, 1, name)
			require.Equal(t, name, calls[0].ActionName, "the body names its action")
			require.JSONEq(t, `{"provider":"stripe","id":"cs_team","kind":"one_time","amount":5000,"currency":"EUR","metadata":{"course":"go","plan":"team"},"mode":"live"}`,
				string(calls[0].Purchase), "the body carries the purchase")
		}
		// The same purchase again, by another event: nothing more.
		res, err = b.svc.Accept(b.ctx, purchase("evt_2", "cs_team", map[string]string{"course": "go", "plan": "team"}))
		require.NoError(t, err)
		require.Empty(t, res.Created)
	})

	t.Run("RoutesChangedMidFlightAddNothingToAPurchaseRouted", func(t *testing.T) {
		t.Parallel()
		before := newCoursePlatform("v1.yaml")
		before.set.Routes = before.set.Routes[:1] // courses only
		b := setup(t, before.option)
		_, err := b.svc.Accept(b.ctx, purchase("evt_1", "cs_1", map[string]string{"course": "go", "plan": "team"}))
		require.NoError(t, err)
		require.Equal(t, []string{"licence", "welcome_email"}, names(b.byAction(t, "cs_1", state.Fulfil)))

		// A node on the new routes (teams get a CRM contact) sees a second
		// event of the purchase, a redelivery and a backfill of it.
		after := newCoursePlatform("v2.yaml")
		cfg := b.cfg
		after.option(&cfg)
		next, err := fulfilment.New(cfg)
		require.NoError(t, err)
		for _, ev := range []provider.Event{
			purchase("evt_2", "cs_1", map[string]string{"course": "go", "plan": "team"}),
			purchase("evt_1", "cs_1", map[string]string{"course": "go", "plan": "team"}),
		} {
			res, err := next.Accept(b.ctx, ev)
			require.NoError(t, err)
			require.Empty(t, res.Created)
		}
		backfilled := purchase("evt_3", "cs_1", map[string]string{"course": "go", "plan": "team"})
		backfilled.Origin = "backfill"
		res, err := next.Accept(b.ctx, backfilled)
		require.NoError(t, err)
		require.Empty(t, res.Created)
		require.Equal(t, []string{"licence", "welcome_email"}, names(b.byAction(t, "cs_1", state.Fulfil)), "the routes in force when it was first paid decide")
		// A new purchase is routed by the new routes.
		res, err = next.Accept(b.ctx, purchase("evt_4", "cs_2", map[string]string{"course": "go", "plan": "team"}))
		require.NoError(t, err)
		require.Len(t, res.Created, 3)
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM purchase WHERE payment_id = 'cs_1' AND routes = 'test-v1.yaml'`))
	})

	t.Run("TwoNodesOnDifferentRoutesRouteAPurchaseOnce", func(t *testing.T) {
		t.Parallel()
		old := newCoursePlatform("v1.yaml")
		old.set.Routes = old.set.Routes[:1]
		b := setup(t, old.option)
		updated := newCoursePlatform("v2.yaml")
		cfg := b.cfg
		updated.option(&cfg)
		other, err := fulfilment.New(cfg)
		require.NoError(t, err)
		// Each payment's two events reach the two nodes at once.
		const n = 20
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			pay := fmt.Sprintf("cs_%d", i)
			meta := map[string]string{"course": "go", "plan": "team"}
			for j, svc := range []*fulfilment.Service{b.svc, other} {
				wg.Go(func() {
					<-start
					_, err := svc.Accept(b.ctx, purchase(fmt.Sprintf("evt_%d_%d", i, j), pay, meta))
					require.NoError(t, err)
				})
			}
		}
		close(start)
		wg.Wait()
		for i := range n {
			pay := fmt.Sprintf("cs_%d", i)
			got := names(b.byAction(t, pay, state.Fulfil))
			recorded, ok, err := db.PurchaseActions(b.ctx, b.db.Pool, db.Payment{Provider: "stripe", PaymentID: pay})
			require.NoError(t, err)
			require.True(t, ok)
			slices.Sort(recorded)
			require.Equal(t, recorded, got, "%s: its rows are the actions recorded with it", pay)
			require.Contains(t, [][]string{{"licence", "welcome_email"}, {"crm_contact", "licence", "welcome_email"}}, got, "one node's routes, whole")
		}
	})

	t.Run("ARefundTakesBackOnlyWhatWasDoneAndWhosePolicySaysSo", func(t *testing.T) {
		t.Parallel()
		cp := newCoursePlatform("routes.yaml")
		b, rows := cp.teamCourse(t)
		// The licence and the contact are done; the email is still pending.
		for _, name := range []string{"licence", "crm_contact"} {
			_, err := b.dispatch(t, rows[name].ID)
			require.NoError(t, err)
		}
		// A partial refund takes back what any refund takes back: the
		// contact, once.
		_, err := b.svc.Accept(b.ctx, refund("evt_r1", "cs_1", false))
		require.NoError(t, err)
		require.Equal(t, []string{"crm_contact"}, names(b.byAction(t, "cs_1", state.Revoke)))
		// The whole refund adds the licence; the email, which no refund
		// takes back, still goes out, and is never sent a revoke.
		_, err = b.svc.Accept(b.ctx, refund("evt_r2", "cs_1", true))
		require.NoError(t, err)
		revokes := b.byAction(t, "cs_1", state.Revoke)
		require.Equal(t, []string{"crm_contact", "licence"}, names(revokes))
		require.NotEqual(t, revokes["licence"].Key, rows["licence"].Key)
		require.Equal(t, state.Pending, b.db.Fulfilment(t, rows["welcome_email"].ID).State)
		for _, f := range revokes {
			_, err := b.dispatch(t, f.ID)
			require.NoError(t, err)
		}
		_, err = b.dispatch(t, rows["welcome_email"].ID)
		require.NoError(t, err)
		require.Equal(t, 2, cp.receivers["licence"].CallsForPayment("cs_1"), "granted and taken back")
		require.Equal(t, 2, cp.receivers["crm_contact"].CallsForPayment("cs_1"), "added and taken back, once for two refunds")
		require.Equal(t, 1, cp.receivers["welcome_email"].CallsForPayment("cs_1"), "sent, never revoked")
		for _, c := range cp.receivers["welcome_email"].Calls() {
			require.Equal(t, state.Fulfil, c.Action)
		}
	})

	t.Run("TransitionsAreCountedPerAction", func(t *testing.T) {
		t.Parallel()
		cp := newCoursePlatform("routes.yaml")
		reg := prometheus.NewRegistry()
		m, err := metrics.New(reg, nil, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		b, rows := cp.teamCourse(t, func(c *fulfilment.Config) { c.Metrics = m })
		for _, f := range rows {
			_, err := b.dispatch(t, f.ID)
			require.NoError(t, err)
		}
		_, err = b.svc.Accept(b.ctx, refund("evt_r", "cs_1", true))
		require.NoError(t, err)
		created := func(action string) float64 {
			return metricstest.Value(t, reg, "guardian_transitions_total", map[string]string{"action": action, "from": "none", "to": "pending"})
		}
		require.Equal(t, 2.0, created("crm_contact"), "its fulfilment and its revocation")
		require.Equal(t, 2.0, created("licence"))
		require.Equal(t, 1.0, created("welcome_email"), "never taken back")
		require.Equal(t, 1.0, metricstest.Value(t, reg, "guardian_dispatches_total", map[string]string{"action": "welcome_email", "outcome": "done"}))
	})

	t.Run("APendingActionTakenBackIsStoppedAloneByItsPolicy", func(t *testing.T) {
		t.Parallel()
		cp := newCoursePlatform("routes.yaml")
		b := setup(t, cp.option)
		_, err := b.svc.Accept(b.ctx, purchase("evt_1", "cs_1", map[string]string{"course": "go"}))
		require.NoError(t, err)
		rows := b.byAction(t, "cs_1", state.Fulfil)
		_, err = b.svc.Accept(b.ctx, refund("evt_r", "cs_1", true))
		require.NoError(t, err)
		require.Equal(t, state.Cancelled, b.db.Fulfilment(t, rows["licence"].ID).State, "never sent")
		require.Equal(t, state.Pending, b.db.Fulfilment(t, rows["welcome_email"].ID).State, "no refund takes the email back")
	})

	t.Run("OneActionDeclinedOrParkedHoldsNoOtherBack", func(t *testing.T) {
		t.Parallel()
		cp := newCoursePlatform("routes.yaml")
		cp.receivers["licence"].Answer = answer(state.Declined)
		cp.receivers["crm_contact"].Answer = answer(state.Unknown)
		b, rows := cp.teamCourse(t)
		for _, f := range rows {
			_, err := b.dispatch(t, f.ID)
			require.NoError(t, err)
		}
		require.Equal(t, state.Failed, b.db.Fulfilment(t, rows["licence"].ID).State)
		require.Equal(t, state.NeedsReconciliation, b.db.Fulfilment(t, rows["crm_contact"].ID).State)
		require.Equal(t, state.Fulfilled, b.db.Fulfilment(t, rows["welcome_email"].ID).State)
		// The declined licence is retried under its next key, alone.
		cp.receivers["licence"].Answer = nil
		out, err := b.svc.Retry(b.ctx, []string{rows["licence"].ID}, "ana")
		require.NoError(t, err)
		require.Equal(t, fulfilment.RetryCreated, out[0].Verdict)
		again := b.db.Fulfilment(t, out[0].FulfilmentID)
		require.Equal(t, "licence", again.ActionName)
		require.NotEqual(t, rows["licence"].Key, again.Key)
		require.Len(t, b.byAction(t, "cs_1", state.Fulfil), 3, "the retry made the licence's row, and only it")
		require.Equal(t, 4, b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE payment_id = 'cs_1'`))
	})

	t.Run("ANodeThatDoesNotPerformAnActionLeavesItPending", func(t *testing.T) {
		t.Parallel()
		cp := newCoursePlatform("routes.yaml")
		b, rows := cp.teamCourse(t)
		older := newCoursePlatform("v1.yaml")
		older.set.Actions = older.set.Actions[:2]
		older.set.Routes = older.set.Routes[:1]
		cfg := b.cfg
		older.option(&cfg)
		delete(cfg.Performers, "crm_contact")
		node, err := fulfilment.New(cfg)
		require.NoError(t, err)
		_, err = node.Dispatch(b.ctx, fulfilment.DispatchRequest{FulfilmentID: rows["crm_contact"].ID, Actor: "old node"})
		require.ErrorIs(t, err, fulfilment.ErrNotPerformedHere)
		require.Equal(t, state.Pending, b.db.Fulfilment(t, rows["crm_contact"].ID).State)
		require.Zero(t, older.receivers["licence"].CallsForPayment("cs_1"))
		_, err = b.dispatch(t, rows["crm_contact"].ID)
		require.NoError(t, err)
		require.Equal(t, state.Fulfilled, b.db.Fulfilment(t, rows["crm_contact"].ID).State)
	})
}

// TestAnUpgradeKeepsEveryKey: a deployment that had one connector and
// upgrades changes nothing. Without an actions file the one action,
// fulfil, is sent under the key Guardian always derived, and the body is
// what it was; with a file, a payment fulfilled before it keeps its one
// action, and a new payment's fulfil action keeps the old derivation.
func TestAnUpgradeKeepsEveryKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A payment fulfilled before actions existed: its row, no purchase.
	old := b.settle(t, "evt_old", "pi_old", state.Done, state.Fulfilled)
	_, err := b.db.Pool.Exec(b.ctx, `DELETE FROM purchase`)
	require.NoError(t, err)
	legacy, err := db.IdempotencyKey(b.ctx, b.db.Pool, "stripe", "pi_old", 0)
	require.NoError(t, err)
	require.Equal(t, legacy, b.db.Fulfilment(t, old).Key)
	var today string
	require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT guardian_idempotency_key('stripe', 'pi_old', 0)`).Scan(&today))
	require.Equal(t, today, legacy, "fulfil's key is guardian_idempotency_key's, as before actions")
	call := b.rec.Calls()[0]
	require.Empty(t, call.ActionName, "without a file the body names no action")
	require.Empty(t, call.Purchase)

	// The file now declares fulfil and a second action, for every purchase.
	recv := &connectortest.Recorder{}
	set := &actions.Set{Source: "routes.yaml", Digest: "v1",
		Actions: []actions.Action{{Name: actions.Fulfil, TakeBack: actions.DefaultPolicy}, {Name: "receipt"}},
		Routes:  []actions.Route{{Actions: []string{actions.Fulfil, "receipt"}}},
	}
	cfg := b.cfg
	cfg.Actions, cfg.Performers = set, map[string]fulfilment.Performer{actions.Fulfil: {Connector: b.rec}, "receipt": {Connector: recv}}
	upgraded, err := fulfilment.New(cfg)
	require.NoError(t, err)
	res, err := upgraded.Accept(b.ctx, providertestPayment("evt_old_again", "pi_old"))
	require.NoError(t, err)
	require.Empty(t, res.Created, "a payment fulfilled before the file gains no action")
	actionsOf, _, err := db.PurchaseActions(b.ctx, b.db.Pool, db.Payment{Provider: "stripe", PaymentID: "pi_old"})
	require.NoError(t, err)
	require.Equal(t, []string{actions.Fulfil}, actionsOf)

	res, err = upgraded.Accept(b.ctx, providertestPayment("evt_new", "pi_new"))
	require.NoError(t, err)
	require.Len(t, res.Created, 2)
	rows := b.byAction(t, "pi_new", state.Fulfil)
	want, err := db.IdempotencyKey(b.ctx, b.db.Pool, "stripe", "pi_new", 0)
	require.NoError(t, err)
	require.Equal(t, want, rows[actions.Fulfil].Key)
	require.NotEqual(t, want, rows["receipt"].Key)
}

// TestWithoutAFileTheOneActionIsEverything: the zero configuration routes
// every paid purchase to fulfil, whatever it bought.
func TestWithoutAFileTheOneActionIsEverything(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, err := b.svc.Accept(b.ctx, purchase("evt_1", "cs_1", nil))
	require.NoError(t, err)
	require.Len(t, res.Created, 1)
	require.Equal(t, actions.Fulfil, b.db.Fulfilment(t, res.FulfilmentID).ActionName)
	require.Equal(t, b.svc.Actions().Names(), []string{actions.Fulfil})
}

// providertestPayment is a paid Stripe event as the other tests send it.
func providertestPayment(eventID, paymentID string) provider.Event {
	ev := purchase(eventID, paymentID, nil)
	ev.Purchase = nil
	return ev
}

// TestActionsApply: an action added to the routes reaches past purchases
// only when an operator applies it: the dry run changes nothing, each
// matching purchase gets it once however many applies run at once, one
// taken back gets nothing, and the purchase's other actions are not sent
// again.
func TestActionsApply(t *testing.T) {
	t.Parallel()
	before := newCoursePlatform("v1.yaml")
	before.set.Routes = before.set.Routes[:1] // courses only: no CRM contact
	b := setup(t, before.option)
	for i, meta := range []map[string]string{
		{"course": "go", "plan": "team"}, {"course": "go", "plan": "team"}, {"course": "go"}, {"course": "go", "plan": "team"},
	} {
		_, err := b.svc.Accept(b.ctx, purchase(fmt.Sprintf("evt_%d", i), fmt.Sprintf("cs_%d", i), meta))
		require.NoError(t, err)
	}
	_, err := b.svc.Accept(b.ctx, refund("evt_r", "cs_3", true)) // taken back
	require.NoError(t, err)

	after := newCoursePlatform("v2.yaml") // teams now pay for a CRM contact
	cfg := b.cfg
	after.option(&cfg)
	svc, err := fulfilment.New(cfg)
	require.NoError(t, err)
	window := fulfilment.ApplyParams{Action: "crm_contact", Operator: "ana", Until: time.Now().Add(time.Minute)}

	dry := window
	dry.DryRun = true
	res, err := svc.ApplyAction(b.ctx, dry)
	require.NoError(t, err)
	require.Equal(t, fulfilment.ApplyResult{Considered: 4, Matched: 3, Reversed: 1, Applied: 2}, res)
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE action_name = 'crm_contact'`), "a dry run changes nothing")

	results := make([]fulfilment.ApplyResult, 4)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			var err error
			results[i], err = svc.ApplyAction(b.ctx, window)
			require.NoError(t, err)
		})
	}
	wg.Wait()
	applied := 0
	for _, r := range results {
		applied += r.Applied
	}
	require.Equal(t, 2, applied, "each purchase once, whatever number of applies")
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE action_name = 'crm_contact'`))
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM action_applied WHERE operator = 'ana'`))
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment_transition t JOIN fulfilment f ON f.id = t.fulfilment_id
		WHERE f.payment_id = 'cs_0' AND f.action_name = 'crm_contact' AND t.actor = 'operator ana'`), "audited under the operator's name")
	require.Empty(t, b.byAction(t, "cs_3", state.Fulfil)["crm_contact"], "never to a purchase taken back")
	require.Empty(t, b.byAction(t, "cs_2", state.Fulfil)["crm_contact"], "only where the routes now say so")
	require.Len(t, b.byAction(t, "cs_0", state.Fulfil), 3)

	again, err := svc.ApplyAction(b.ctx, window)
	require.NoError(t, err)
	require.Equal(t, 2, again.Already)
	require.Zero(t, again.Applied)
	_, err = svc.ApplyAction(b.ctx, fulfilment.ApplyParams{Action: "nothing", Operator: "ana"})
	require.Error(t, err)
}

// TestActionsApplyReachesPaymentsFulfilledBeforeActions: a deployment
// that upgrades has no recorded purchase for what it fulfilled before; an
// apply over the window records each as intake would (its one action,
// decided when it was paid) and gives it the new action once, never to
// one taken back, never sending its fulfilment again.
func TestActionsApplyReachesPaymentsFulfilledBeforeActions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.settle(t, "evt_0", "pi_0", state.Done, state.Fulfilled)
	b.pay(t, "evt_1", "pi_1")
	b.pay(t, "evt_2", "pi_2")
	_, err := b.svc.Accept(b.ctx, refund("evt_r", "pi_2", true))
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(b.ctx, `DELETE FROM purchase`) // as before the upgrade to actions
	require.NoError(t, err)
	sent := len(b.rec.Calls())

	crm := &connectortest.Recorder{}
	cfg := b.cfg
	cfg.Connector = nil
	cfg.Actions = &actions.Set{Source: "routes.yaml", Digest: "v1",
		Actions: []actions.Action{{Name: actions.Fulfil, TakeBack: actions.DefaultPolicy}, {Name: "crm_contact", TakeBack: actions.Policy{}}},
		Routes:  []actions.Route{{Name: "all", Actions: []string{actions.Fulfil, "crm_contact"}, Match: actions.Match{Providers: []string{"stripe"}}}}}
	cfg.Performers = map[string]fulfilment.Performer{actions.Fulfil: {Connector: b.rec}, "crm_contact": {Connector: crm}}
	svc, err := fulfilment.New(cfg)
	require.NoError(t, err)
	window := fulfilment.ApplyParams{Action: "crm_contact", Operator: "ana", Since: time.Now().Add(-time.Hour)}

	dry := window
	dry.DryRun = true
	res, err := svc.ApplyAction(b.ctx, dry)
	require.NoError(t, err)
	require.Equal(t, fulfilment.ApplyResult{Considered: 3, Matched: 3, Reversed: 1, Applied: 2}, res)
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM purchase`), "a dry run records nothing")

	res, err = svc.ApplyAction(b.ctx, window)
	require.NoError(t, err)
	require.Equal(t, fulfilment.ApplyResult{Considered: 3, Matched: 3, Reversed: 1, Applied: 2}, res)
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM purchase WHERE actions = '{fulfil,crm_contact}'`))
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM purchase WHERE payment_id = 'pi_2' AND actions = '{fulfil}'`))
	require.Equal(t, 3, b.db.Count(t, `SELECT count(*) FROM purchase p JOIN webhook_event e ON e.provider = p.provider AND e.payment_id = p.payment_id
		WHERE p.routed_at = e.first_seen_at`), "decided when it was paid")
	require.Len(t, b.byAction(t, "pi_0", state.Fulfil), 2)
	require.Empty(t, b.byAction(t, "pi_2", state.Fulfil)["crm_contact"], "never to a payment taken back")
	require.Len(t, b.rec.Calls(), sent, "the one action is never sent again")

	again, err := svc.ApplyAction(b.ctx, window)
	require.NoError(t, err)
	require.Equal(t, fulfilment.ApplyResult{Considered: 3, Matched: 3, Already: 2, Reversed: 1}, again, "recorded now, found in the window as any purchase")
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE action_name = 'crm_contact'`))
}
