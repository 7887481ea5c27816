package fulfilment_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/actions"
	"github.com/guardian-pay/guardian/app/provider"
)

// A subscription's standing as its provider tells it: past due (or
// paused) at one time, active again at a later one. at is minutes past a
// fixed hour, the provider's signed time.
func subSuspend(n int, id string, at int) provider.Event {
	return provider.Event{Provider: "stripe", ID: id, Type: "customer.subscription.updated", Payload: []byte(`{}`),
		Reversal:   &provider.Reversal{Kind: provider.Suspension, Subscription: fmt.Sprintf("sub_%d", n), Standing: provider.PastDue},
		StandingAt: standingTime(at)}
}

func subResume(n int, id string, at int) provider.Event {
	return provider.Event{Provider: "stripe", ID: id, Type: "customer.subscription.updated", Payload: []byte(`{}`),
		Resumes: fmt.Sprintf("sub_%d", n), StandingAt: standingTime(at)}
}

func standingTime(minutes int) time.Time {
	return time.Date(2026, 12, 1, 10, minutes, 0, 0, time.UTC)
}

// suspendingPlatform is the course platform whose licence is also taken
// back while its subscription is suspended, and granted again after.
func suspendingPlatform() coursePlatform {
	cp := newCoursePlatform("routes.yaml")
	cp.set.Actions[0].TakeBack = append(actions.Policy{actions.SubscriptionSuspended}, actions.DefaultPolicy...)
	return cp
}

// grants sums a subscription's licence ledger over its start's purchase
// and its grants again: granted and taken back, and the largest number of
// grants any one of them holds.
func (b *testBundle) grants(t *testing.T, start string) (granted, takenBack, most int) {
	t.Helper()
	for _, payment := range []string{start, start + "~1", start + "~2", start + "~3"} {
		l := b.ledger(t, payment)
		granted, takenBack, most = granted+l["licence fulfil"], takenBack+l["licence revoke"], max(most, l["licence fulfil"], l["licence revoke"])
	}
	return granted, takenBack, most
}

func TestSubscriptionStanding(t *testing.T) {
	t.Parallel()

	t.Run("KeptByDefault", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newCoursePlatform("routes.yaml").option)
		for _, ev := range []provider.Event{subStart(1), subSuspend(1, "evt_due", 1), subResume(1, "evt_paid", 2)} {
			_, err := b.svc.Accept(b.ctx, ev)
			require.NoError(t, err)
			b.settleAll(t, "cs_sub_1")
		}
		require.Equal(t, map[string]int{"licence fulfil": 1, "welcome_email fulfil": 1}, b.ledger(t, "cs_sub_1"))
		require.Zero(t, b.db.Count(t, `SELECT count(*) FROM purchase WHERE root IS NOT NULL`), "nothing taken back: nothing granted again")
	})

	t.Run("TakenBackAndGrantedAgainEachOnce", func(t *testing.T) {
		t.Parallel()
		cp := suspendingPlatform()
		b := setup(t, cp.option)
		step := func(ev provider.Event, settle ...string) {
			t.Helper()
			_, err := b.svc.Accept(b.ctx, ev)
			require.NoError(t, err)
			for _, p := range settle {
				b.settleAll(t, p)
			}
		}
		step(subStart(1), "cs_sub_1")
		step(subSuspend(1, "evt_due_1", 1), "cs_sub_1")
		step(subSuspend(1, "evt_paused_1", 2), "cs_sub_1") // a second word of suspension
		require.Equal(t, map[string]int{"licence fulfil": 1, "licence revoke": 1, "welcome_email fulfil": 1}, b.ledger(t, "cs_sub_1"),
			"the licence is taken back while suspended, once; the email kept")
		step(subResume(1, "evt_paid_1", 3), "cs_sub_1~1")
		step(subResume(1, "evt_paid_1", 3), "cs_sub_1~1")   // its redelivery
		step(subResume(1, "evt_active_1", 4), "cs_sub_1~1") // another word that it is active
		require.Equal(t, map[string]int{"licence fulfil": 1}, b.ledger(t, "cs_sub_1~1"), "granted again once, the licence alone")
		step(subSuspend(1, "evt_due_2", 5), "cs_sub_1~1")
		step(subResume(1, "evt_paid_2", 6), "cs_sub_1~2")
		step(subEnd(1, "customer.subscription.deleted"), "cs_sub_1", "cs_sub_1~1", "cs_sub_1~2")
		require.Equal(t, map[string]int{"licence fulfil": 1, "licence revoke": 1}, b.ledger(t, "cs_sub_1~1"))
		require.Equal(t, map[string]int{"licence fulfil": 1, "licence revoke": 1}, b.ledger(t, "cs_sub_1~2"), "the end takes back the grant in force")
		require.Equal(t, map[string]int{"licence fulfil": 1, "licence revoke": 1, "welcome_email fulfil": 1}, b.ledger(t, "cs_sub_1"))
		step(subResume(1, "evt_after_end", 7))
		require.Zero(t, b.db.Count(t, `SELECT count(*) FROM purchase WHERE payment_id = 'cs_sub_1~3'`), "nothing is granted after the end")

		calls := cp.receivers["licence"].Calls()
		require.Len(t, calls, 6, "grant, take back, three times")
		keys := map[string]bool{}
		for _, c := range calls {
			keys[c.Key] = true
		}
		require.Len(t, keys, 6, "each under a key of its own")
	})

	t.Run("TheLaterWordDecidesInAnyOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, suspendingPlatform().option)
		perms := permutations([]string{"start", "suspend", "resume"})
		for n, order := range perms {
			start := fmt.Sprintf("cs_sub_%d", n)
			for _, step := range order {
				ev := map[string]provider.Event{"start": subStart(n), "suspend": subSuspend(n, fmt.Sprintf("evt_due_%d", n), 1),
					"resume": subResume(n, fmt.Sprintf("evt_paid_%d", n), 2)}[step]
				_, err := b.svc.Accept(b.ctx, ev)
				require.NoError(t, err)
				for _, p := range []string{start, start + "~1"} {
					b.settleAll(t, p)
				}
			}
			granted, takenBack, most := b.grants(t, start)
			require.Equal(t, 1, granted-takenBack, "%v: active at the end, so one licence held", order)
			require.LessOrEqual(t, most, 1, "%v: each grant and take-back once", order)
		}
		require.Len(t, perms, 6)
	})

	t.Run("NoAccessOutlivesTheEndInAnyOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, suspendingPlatform().option)
		perms := permutations([]string{"start", "suspend", "resume", "end"})
		for n, order := range perms {
			start := fmt.Sprintf("cs_sub_%d", n)
			for _, step := range order {
				ev := map[string]provider.Event{"start": subStart(n), "suspend": subSuspend(n, fmt.Sprintf("evt_due_%d", n), 1),
					"resume": subResume(n, fmt.Sprintf("evt_paid_%d", n), 2), "end": subEnd(n, "customer.subscription.deleted")}[step]
				_, err := b.svc.Accept(b.ctx, ev)
				require.NoError(t, err)
				for _, p := range []string{start, start + "~1"} {
					b.settleAll(t, p)
				}
			}
			granted, takenBack, most := b.grants(t, start)
			require.Equal(t, granted, takenBack, "%v: nothing held after the end", order)
			require.LessOrEqual(t, most, 1, "%v", order)
		}
	})

	t.Run("AtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, suspendingPlatform().option)
		const subs = 12
		b.atOnce(t, subs, func(n int) []provider.Event {
			return []provider.Event{subStart(n), subSuspend(n, fmt.Sprintf("evt_due_%d", n), 1), subResume(n, fmt.Sprintf("evt_paid_%d", n), 2)}
		}, func(n int) string { return fmt.Sprintf("cs_sub_%d", n) })
		for n := range subs {
			start := fmt.Sprintf("cs_sub_%d", n)
			b.settleAll(t, start+"~1")
			granted, takenBack, most := b.grants(t, start)
			require.Equal(t, 1, granted-takenBack, "%s: one licence held", start)
			require.LessOrEqual(t, most, 1, start)
		}
	})
}
