package fulfilment_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/actions"
	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/connector/connectortest"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/lock"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

// reversal is a verified Stripe reversal event of paymentID.
func reversal(eventID, paymentID string, r provider.Reversal) provider.Event {
	r.PaymentID = paymentID
	return provider.Event{Provider: "stripe", ID: eventID, Type: "charge.refunded", Reversal: &r,
		Payload: []byte(`{"id":"` + eventID + `"}`)}
}

var (
	fullRefund    = provider.Reversal{Kind: provider.Refund, Full: true}
	partialRefund = provider.Reversal{Kind: provider.Refund}
	disputeOpened = provider.Reversal{Kind: provider.Dispute, Stage: provider.DisputeOpened}
	disputeLost   = provider.Reversal{Kind: provider.Dispute, Stage: provider.DisputeLost}
	disputeWon    = provider.Reversal{Kind: provider.Dispute, Stage: provider.DisputeWon}
	ended         = provider.Reversal{Kind: provider.End, Subscription: "sub_1"}
)

// rows counts a payment's rows of one action in each state.
func (b *testBundle) rows(t *testing.T, paymentID string, action state.Action) map[state.State]int {
	t.Helper()
	out := map[state.State]int{}
	fs, err := db.FulfilmentsByPayment(b.ctx, b.db.Pool, "stripe", paymentID)
	require.NoError(t, err)
	for _, f := range fs {
		if f.Action == action {
			out[f.State]++
		}
	}
	return out
}

// revocation returns the payment's one revocation.
func (b *testBundle) revocation(t *testing.T, paymentID string) db.Fulfilment {
	t.Helper()
	fs, err := db.FulfilmentsByPayment(b.ctx, b.db.Pool, "stripe", paymentID)
	require.NoError(t, err)
	var out []db.Fulfilment
	for _, f := range fs {
		if f.Action == state.Revoke {
			out = append(out, f)
		}
	}
	require.Len(t, out, 1, "one revocation for the payment")
	return out[0]
}

// sweep runs a round of each sweep, as the leader's services would, and
// returns the rows the take-back moved.
func (b *testBundle) sweep(t *testing.T) int {
	t.Helper()
	_, err := b.svc.ParkStale(b.ctx, "test sweeper", lock.Lease{Name: "guardian_sweep_stale", Fence: 1})
	require.NoError(t, err)
	n, err := b.svc.TakeBackReversed(b.ctx, "test sweeper", lock.Lease{Name: "guardian_sweep_reversed", Fence: 1})
	require.NoError(t, err)
	_, err = b.svc.RequeueStranded(b.ctx, lock.Lease{Name: "guardian_sweep_stranded", Fence: 1})
	require.NoError(t, err)
	return n
}

// TestTakeBackWindowOutlivesItsLeader: where the sweep's revocation
// catch-all stands is the database's, not the leader's: a new leader's
// first round goes on from the last one's window instead of reading every
// reversal ever stored (6 s at 10 million payments, at every deploy), and
// the full round still comes once FullTakeBackEvery has passed since the
// last.
func TestTakeBackWindowOutlivesItsLeader(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.Zero(t, b.sweep(t), "the first round, full, finds nothing")
	// A payment fulfilled two hours ago, and a refund for it that no round
	// has acted on (the windowed rounds read only recent settlements).
	fid := b.settle(t, "evt_pay", "pi_1", state.Done, state.Fulfilled)
	b.db.Backdate(t, fid, time.Now().Add(-2*time.Hour))
	_, err := b.db.Pool.Exec(b.ctx, `INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body, reversal, reverses, revokes)
		VALUES ('stripe', 'evt_refund', 'charge.refunded', 'pi_1', '\x7b7d', 'refund', 'pi_1', '{fulfil}')`)
	require.NoError(t, err)

	next, err := fulfilment.New(b.cfg) // the next leader, after a deploy
	require.NoError(t, err)
	sweep := func() int {
		n, err := next.TakeBackReversed(b.ctx, "next sweeper", lock.Lease{Name: "guardian_sweep_reversed", Fence: 1})
		require.NoError(t, err)
		return n
	}
	require.Zero(t, sweep(), "the new leader's first round reads the window, not every reversal")
	require.Empty(t, b.rows(t, "pi_1", state.Revoke))

	_, err = b.db.Pool.Exec(b.ctx, `UPDATE take_back_window SET last_full = last_full - $1::interval`, fulfilment.FullTakeBackEvery.String())
	require.NoError(t, err)
	require.Equal(t, 1, sweep(), "the hourly full round finds it")
	require.Equal(t, state.Pending, b.revocation(t, "pi_1").State)
}

// TestTheSweepsRoundTakesOneProcess: the take-back round plans its
// statements without parallel workers (db.Serial). On two cores a
// parallel plan of the round over a burst took 270 to 320 ms of both, one
// process 63 ms, at ten million payments: the cycles a round takes are
// intake's and dispatch's. A trigger records the setting each revocation
// the round makes was written under.
func TestTheSweepsRoundTakesOneProcess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fid := b.settle(t, "evt_pay", "pi_1", state.Done, state.Fulfilled)
	b.db.Backdate(t, fid, time.Now().Add(-2*time.Hour))
	_, err := b.db.Pool.Exec(b.ctx, `
		INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body, reversal, reverses, revokes)
		VALUES ('stripe', 'evt_refund', 'charge.refunded', 'pi_1', '\x7b7d', 'refund', 'pi_1', '{fulfil}');
		CREATE TABLE planned_with (workers text);
		CREATE FUNCTION record_workers() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO planned_with VALUES (current_setting('max_parallel_workers_per_gather'));
			RETURN NEW;
		END $$;
		CREATE TRIGGER record_workers AFTER INSERT ON fulfilment_identity FOR EACH ROW WHEN (NEW.action = 'revoke') EXECUTE FUNCTION record_workers()`)
	require.NoError(t, err)
	require.Equal(t, 1, b.sweep(t), "the round, the database's first and so full, takes the payment back")
	require.Equal(t, state.Pending, b.revocation(t, "pi_1").State)
	var workers string
	require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT workers FROM planned_with`).Scan(&workers))
	require.Equal(t, "0", workers, "the round's revocation was made by a statement that could plan parallel workers")
	var outside string
	require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SHOW max_parallel_workers_per_gather`).Scan(&outside))
	require.NotEqual(t, "0", outside, "the setting is the round's transaction's alone")
}

func TestReversalPolicy(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", "full", "full_refund,sometimes"} {
		_, err := actions.ParsePolicy(bad)
		require.Error(t, err, bad)
	}
	tests := []struct {
		policy string
		takes  []provider.Reversal
		leaves []provider.Reversal
	}{
		{"full_refund,dispute_lost", []provider.Reversal{fullRefund, disputeLost}, []provider.Reversal{partialRefund, disputeOpened, disputeWon, ended}},
		{"any_refund", []provider.Reversal{fullRefund, partialRefund}, []provider.Reversal{disputeOpened, disputeLost, disputeWon, ended}},
		{"dispute_opened", []provider.Reversal{disputeOpened, disputeLost}, []provider.Reversal{fullRefund, disputeWon, ended}},
		{"subscription_ended", []provider.Reversal{ended}, []provider.Reversal{fullRefund, partialRefund, disputeOpened, disputeLost, disputeWon}},
		{"none", nil, []provider.Reversal{fullRefund, partialRefund, disputeOpened, disputeLost, disputeWon, ended}},
	}
	for _, tt := range tests {
		p, err := actions.ParsePolicy(tt.policy)
		require.NoError(t, err)
		for _, r := range tt.takes {
			require.True(t, p.Revokes(r), "%s takes back a %s", tt.policy, r)
		}
		for _, r := range tt.leaves {
			require.False(t, p.Revokes(r), "%s leaves a %s", tt.policy, r)
		}
	}
}

// TestTakeBack: a refund or dispute the policy takes back for is a second
// action with the guarantees of the first, in every order the events and
// the dispatch can meet.
func TestTakeBack(t *testing.T) {
	t.Parallel()

	t.Run("AFulfilledPaymentIsTakenBackOnceHoweverManyReversalsArrive", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		fid := b.settle(t, "evt_pay", "pi_1", state.Done, state.Fulfilled)
		evs := []provider.Event{reversal("evt_partial", "pi_1", partialRefund)}
		for i := range 4 { // one refund as charge.refunded and refund.updated, each redelivered
			evs = append(evs, reversal("evt_full_"+fmt.Sprint(i%2), "pi_1", fullRefund))
		}
		evs = append(evs, reversal("evt_lost", "pi_1", disputeLost), reversal("evt_won", "pi_1", disputeWon))
		_, errs := b.storm(t, evs)
		for _, err := range errs {
			require.NoError(t, err)
		}
		rv := b.revocation(t, "pi_1")
		require.Equal(t, state.Pending, rv.State)
		st, err := db.GetStats(b.ctx, b.db.Pool)
		require.NoError(t, err)
		require.Equal(t, map[state.State]int{state.Pending: 1}, st.Revocations, "the gauges count it")
		require.Equal(t, 1, b.enqueuer.count(t, rv.ID), "one dispatch job for it")
		require.NotEqual(t, b.db.Fulfilment(t, fid).Key, rv.Key, "its own key")
		require.Regexp(t, `^gk1_[0-9a-f]{40}$`, rv.Key)

		res, err := b.dispatch(t, rv.ID)
		require.NoError(t, err)
		require.Equal(t, state.Fulfilled, res.State)
		calls := b.rec.Calls()
		require.Len(t, calls, 2)
		require.Equal(t, state.Fulfil, calls[0].Action)
		require.Equal(t, state.Revoke, calls[1].Action)
		require.Equal(t, rv.Key, calls[1].Key)

		b.sweep(t)
		_, err = b.svc.Accept(b.ctx, reversal("evt_full_later", "pi_1", fullRefund))
		require.NoError(t, err)
		require.Equal(t, map[state.State]int{state.Fulfilled: 1}, b.rows(t, "pi_1", state.Revoke), "taken back once, ever")
		require.Len(t, b.rec.Calls(), 2)
	})

	t.Run("ReversedBeforeItWentOutIsNeverSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		fid := b.pay(t, "evt_pay", "pi_2")
		_, err := b.svc.Accept(b.ctx, reversal("evt_full", "pi_2", fullRefund))
		require.NoError(t, err)
		require.Equal(t, state.Cancelled, b.db.Fulfilment(t, fid).State)
		res, err := b.dispatch(t, fid)
		require.NoError(t, err)
		require.Equal(t, state.Cancelled, res.State)
		b.sweep(t)
		require.Empty(t, b.rec.Calls(), "nothing fulfilled, nothing revoked")
		require.Empty(t, b.rows(t, "pi_2", state.Revoke))
		ts := b.db.Transitions(t, fid)
		require.Equal(t, fulfilment.ReversedBeforeDispatch, ts[len(ts)-1].Reason)
	})

	t.Run("APaymentEventAfterItsReversalFulfilsNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.svc.Accept(b.ctx, reversal("evt_lost", "pi_3", disputeLost))
		require.NoError(t, err)
		res, err := b.svc.Accept(b.ctx, providertest.Payment("evt_pay", "pi_3"))
		require.NoError(t, err)
		require.Empty(t, res.FulfilmentID)
		b.sweep(t)
		require.Empty(t, b.rec.Calls())
	})

	// A database restored from before a payment's fulfilment went out has
	// forgotten it, and the provider's redeliveries may bring the reversal
	// first, or the payment event before the fulfilment's job runs again:
	// Guardian's rows alone would say nothing went out. Keys derive from
	// the payment, so the receiver is asked.
	t.Run("AReversalBeforeAnythingWentOutAsksTheReceiver", func(t *testing.T) {
		t.Parallel()
		type answerCase struct {
			answer  connector.Answer
			want    state.State
			revoked bool
		}
		var cases []struct {
			answerCase
			reversalFirst bool
		}
		for _, first := range []bool{true, false} {
			for _, ac := range []answerCase{
				{connector.Performed, state.Fulfilled, true},     // acted before the restore: taken back
				{connector.NotPerformed, state.Cancelled, false}, // never sent: nothing to take
				{connector.CannotTell, state.NeedsReconciliation, false},
			} {
				cases = append(cases, struct {
					answerCase
					reversalFirst bool
				}{ac, first})
			}
		}
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/reversal_first=%v", tc.answer, tc.reversalFirst), func(t *testing.T) {
				t.Parallel()
				var asked []string
				b := setup(t, func(c *fulfilment.Config) {
					c.ReconcileGrace = c.ConnectorTimeout
					c.Looker = connectortest.LookerFunc(func(_ context.Context, key string) (connector.Answer, map[string]any, error) {
						asked = append(asked, key)
						return tc.answer, nil, nil
					})
				})
				var fid string
				if tc.reversalFirst {
					_, err := b.svc.Accept(b.ctx, reversal("evt_lost", "pi_r", disputeLost))
					require.NoError(t, err)
					res, err := b.svc.Accept(b.ctx, providertest.Payment("evt_pay", "pi_r"))
					require.NoError(t, err)
					require.Equal(t, state.NeedsReconciliation, res.FulfilmentState)
					require.Zero(t, b.enqueuer.count(t, res.FulfilmentID), "never dispatched")
					fid = res.FulfilmentID
				} else {
					fid = b.pay(t, "evt_pay", "pi_r") // pending, its job not yet run
					_, err := b.svc.Accept(b.ctx, reversal("evt_lost", "pi_r", disputeLost))
					require.NoError(t, err)
					res, err := b.dispatch(t, fid)
					require.NoError(t, err)
					require.False(t, res.Called, "its job finds it taken back")
				}
				f := b.db.Fulfilment(t, fid)
				require.Equal(t, state.NeedsReconciliation, f.State, "parked, to be asked")
				require.Zero(t, f.Attempt)

				b.db.Backdate(t, f.ID, time.Now().Add(-time.Minute))
				_, err := b.svc.Reconcile(b.ctx, "test reconciler")
				require.NoError(t, err)
				key, err := db.IdempotencyKey(b.ctx, b.db.Pool, "stripe", "pi_r", 0)
				require.NoError(t, err)
				require.Equal(t, []string{key}, asked, "the payment's own key is asked")
				require.Equal(t, tc.want, b.db.Fulfilment(t, f.ID).State)
				require.Empty(t, b.rec.Calls(), "the fulfilment is never sent")
				if !tc.revoked {
					require.Empty(t, b.rows(t, "pi_r", state.Revoke))
					return
				}
				rv := b.revocation(t, "pi_r")
				require.Equal(t, state.Pending, rv.State)
				require.Equal(t, 1, b.enqueuer.count(t, rv.ID), "the revocation is dispatched")
			})
		}
	})

	t.Run("APartialRefundUnderTheDefaultPolicyLeavesThePayment", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.settle(t, "evt_pay", "pi_4", state.Done, state.Fulfilled)
		_, err := b.svc.Accept(b.ctx, reversal("evt_partial", "pi_4", partialRefund))
		require.NoError(t, err)
		b.sweep(t)
		require.Empty(t, b.rows(t, "pi_4", state.Revoke))
		var reversal, reverses string
		require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT reversal, coalesce(reverses, '') FROM webhook_event WHERE event_id = 'evt_partial'`).Scan(&reversal, &reverses))
		require.Equal(t, "partial refund", reversal, "stored with what it says")
		require.Empty(t, reverses)
	})

	t.Run("InFlightWaitsForItsFacts", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			outcome state.Outcome
			settled state.State
			revoked bool
		}{
			{state.Done, state.Fulfilled, true},   // it was done: taken back
			{state.Declined, state.Failed, false}, // nothing was done: nothing to take
			{state.Unknown, state.NeedsReconciliation, false},
		} {
			t.Run(string(tc.settled), func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				b.sweep(t) // the leader's first, full round: the one below reads the recent window
				fid := b.pay(t, "evt_pay", "pi_5")
				inCall, release := make(chan struct{}), make(chan struct{})
				b.rec.Answer = func(context.Context, connector.Request) connector.Result {
					close(inCall)
					<-release
					return connector.Result{Outcome: tc.outcome}
				}
				done := make(chan error)
				go func() { _, err := b.dispatch(t, fid); done <- err }()
				<-inCall
				_, err := b.svc.Accept(b.ctx, reversal("evt_full", "pi_5", fullRefund))
				require.NoError(t, err)
				require.Equal(t, state.Dispatching, b.db.Fulfilment(t, fid).State, "a call in flight is left to its facts")
				require.Empty(t, b.rows(t, "pi_5", state.Revoke))
				close(release)
				require.NoError(t, <-done)
				require.Equal(t, tc.settled, b.db.Fulfilment(t, fid).State)
				b.sweep(t)
				if tc.revoked {
					require.Equal(t, state.Pending, b.revocation(t, "pi_5").State)
				} else {
					require.Empty(t, b.rows(t, "pi_5", state.Revoke), "never a revoke for something not known done")
				}
			})
		}
	})

	// Raced, with a lookup and without: with one, a pending row the
	// reversal stops is parked and asked, and the receiver's answer, by
	// the fact of what it was sent, settles it.
	t.Run("RacingEventsAndDispatchesNeverRevokeWhatWasNotDone", func(t *testing.T) {
		t.Parallel()
		for _, lookup := range []bool{false, true} {
			t.Run(fmt.Sprintf("lookup=%v", lookup), func(t *testing.T) {
				t.Parallel()
				raceReversals(t, lookup)
			})
		}
	})
}

// raceReversals races 24 payments' events, dispatches and full refunds:
// each ends fulfilled and taken back once, or never sent and never
// revoked.
func raceReversals(t *testing.T, lookup bool) {
	var b *testBundle
	b = setup(t, func(c *fulfilment.Config) {
		if !lookup {
			return
		}
		c.ReconcileGrace = c.ConnectorTimeout
		c.Looker = connectortest.LookerFunc(func(_ context.Context, key string) (connector.Answer, map[string]any, error) {
			for _, call := range b.rec.Calls() {
				if call.Key == key {
					return connector.Performed, nil, nil
				}
			}
			return connector.NotPerformed, nil, nil
		})
	})
	const payments = 24
	var wg sync.WaitGroup
	for i := range payments {
		pi := fmt.Sprintf("pi_race_%d", i)
		wg.Go(func() {
			res, err := b.svc.Accept(b.ctx, providertest.Payment("evt_pay_"+pi, pi))
			require.NoError(t, err)
			if res.FulfilmentID != "" {
				_, err = b.dispatch(t, res.FulfilmentID)
				require.NoError(t, err)
			}
		})
		wg.Go(func() {
			time.Sleep(time.Duration(i%4) * time.Millisecond)
			_, err := b.svc.Accept(b.ctx, reversal("evt_full_"+pi, pi, fullRefund))
			require.NoError(t, err)
		})
	}
	wg.Wait()
	parked := 0
	if lookup {
		// What the reversals parked is asked, once past the grace.
		parked = b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE state = 'needs_reconciliation'`)
		_, err := b.db.Pool.Exec(b.ctx, `UPDATE fulfilment SET updated_at = now() - interval '1 minute' WHERE state = 'needs_reconciliation'`)
		require.NoError(t, err)
		sum, err := b.svc.Reconcile(b.ctx, "test reconciler")
		require.NoError(t, err)
		require.Equal(t, parked, sum.Checked)
		require.Zero(t, b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE state = 'needs_reconciliation'`), "every parked row settled by its answer")
	}
	b.sweep(t)
	// Every revocation goes out, as the jobs would.
	for i := range payments {
		pi := fmt.Sprintf("pi_race_%d", i)
		if n := b.rows(t, pi, state.Revoke); len(n) > 0 {
			_, err := b.dispatch(t, b.revocation(t, pi).ID)
			require.NoError(t, err)
		}
	}
	fulfilled, cancelled := 0, 0
	for i := range payments {
		pi := fmt.Sprintf("pi_race_%d", i)
		f, r := b.rows(t, pi, state.Fulfil), b.rows(t, pi, state.Revoke)
		switch {
		case f[state.Fulfilled] == 1:
			fulfilled++
			require.Equal(t, map[state.State]int{state.Fulfilled: 1}, r, "%s: fulfilled, so taken back once", pi)
			require.Equal(t, 2, b.rec.CallsForPayment(pi))
		default:
			cancelled++
			require.Empty(t, r, "%s: never fulfilled, never revoked: %v", pi, f)
			require.Zero(t, b.rec.CallsForPayment(pi))
		}
	}
	t.Logf("%d payments fulfilled then taken back, %d reversed before they went out (%d of them parked and asked)", fulfilled, cancelled, parked)
}

// TestRetryADeclinedRevocation: a revocation the receiver declined is not
// sent again on its own; an operator's retry sends it under the payment's
// next revoke key, once, and only while the payment stays fulfilled.
func TestRetryADeclinedRevocation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.settle(t, "evt_pay", "pi_r", state.Done, state.Fulfilled)
	_, err := b.svc.Accept(b.ctx, reversal("evt_full", "pi_r", fullRefund))
	require.NoError(t, err)
	first := b.revocation(t, "pi_r")
	b.rec.Answer = answer(state.Declined)
	_, err = b.dispatch(t, first.ID)
	require.NoError(t, err)
	b.rec.Answer = nil
	require.Equal(t, state.Failed, b.db.Fulfilment(t, first.ID).State)
	b.sweep(t)
	require.Equal(t, map[state.State]int{state.Failed: 1}, b.rows(t, "pi_r", state.Revoke), "not sent again on its own")

	var results [][]fulfilment.BulkResult
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 3 { // two operators and a double click
		wg.Go(func() {
			res, err := b.svc.Retry(b.ctx, []string{first.ID}, "ana")
			require.NoError(t, err)
			mu.Lock()
			results = append(results, res)
			mu.Unlock()
		})
	}
	wg.Wait()
	created := 0
	for _, res := range results {
		if res[0].Verdict == fulfilment.RetryCreated {
			created++
		}
	}
	require.Equal(t, 1, created, "one retry creates it; the others find it held")
	rows := b.rows(t, "pi_r", state.Revoke)
	require.Equal(t, map[state.State]int{state.Failed: 1, state.Pending: 1}, rows)
	fs, err := db.FulfilmentsByPayment(b.ctx, b.db.Pool, "stripe", "pi_r")
	require.NoError(t, err)
	var second db.Fulfilment
	for _, f := range fs {
		if f.Action == state.Revoke && f.State == state.Pending {
			second = f
		}
	}
	require.NotEqual(t, first.Key, second.Key, "the payment's next revoke key")
	res, err := b.dispatch(t, second.ID)
	require.NoError(t, err)
	require.Equal(t, state.Fulfilled, res.State)
	require.Equal(t, state.Revoke, b.rec.Calls()[len(b.rec.Calls())-1].Action)
}

// paidEUR is a verified payment of paymentID that says 10.00 EUR was paid.
func paidEUR(eventID, paymentID string) provider.Event {
	ev := providertest.Payment(eventID, paymentID)
	ev.Paid = &provider.Money{Minor: 1000, Currency: "EUR"}
	return ev
}

// refundEUR is a verified refund of paymentID that does not say whether it
// is whole, of minor cents, refund refundID.
func refundEUR(eventID, paymentID, refundID string, minor int64) provider.Event {
	return reversal(eventID, paymentID, provider.Reversal{Kind: provider.Refund, RefundID: refundID, Amount: &provider.Money{Minor: minor, Currency: "EUR"}})
}

// TestRefundsWeighedAgainstThePayment: refunds whose events do not say
// whether they are whole are weighed against what the payment's paid event
// says was paid: a part takes nothing back, the rest of it does, once; the
// two events of one refund count once; refunds that arrive before the
// payment's paid event keep it from being fulfilled.
func TestRefundsWeighedAgainstThePayment(t *testing.T) {
	t.Parallel()

	t.Run("PartThenTheRestTakesItBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.settleEvent(t, paidEUR("evt_paid", "pi_w1"))
		for _, ev := range []provider.Event{refundEUR("evt_re1_created", "pi_w1", "re_1", 400), refundEUR("evt_re1_updated", "pi_w1", "re_1", 400)} {
			_, err := b.svc.Accept(b.ctx, ev)
			require.NoError(t, err)
		}
		require.Empty(t, b.rows(t, "pi_w1", state.Revoke), "40% refunded, counted once: nothing taken back")
		_, err := b.svc.Accept(b.ctx, refundEUR("evt_re2", "pi_w1", "re_2", 600))
		require.NoError(t, err)
		require.Equal(t, map[state.State]int{state.Pending: 1}, b.rows(t, "pi_w1", state.Revoke), "the rest refunded: taken back once")
		require.Equal(t, state.Fulfilled, b.db.Fulfilment(t, id).State)
		require.Equal(t, 3, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE reverses = 'pi_w1' AND reversal = 'full refund'`))
		require.Zero(t, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE refund_of IS NOT NULL`), "nothing left undecided")
	})

	t.Run("WholeBeforeThePaidEventNeverFulfils", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.svc.Accept(b.ctx, refundEUR("evt_early_refund", "pi_w2", "re_1", 1000))
		require.NoError(t, err)
		res, err := b.svc.Accept(b.ctx, paidEUR("evt_late_paid", "pi_w2"))
		require.NoError(t, err)
		require.Empty(t, res.FulfilmentID, "a payment refunded whole before its paid event arrived is never fulfilled")
		require.Zero(t, b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE payment_id = 'pi_w2'`))
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE reverses = 'pi_w2'`))
	})

	t.Run("PartBeforeThePaidEventFulfils", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.svc.Accept(b.ctx, refundEUR("evt_early_part", "pi_w3", "re_1", 300))
		require.NoError(t, err)
		res, err := b.svc.Accept(b.ctx, paidEUR("evt_paid_after_part", "pi_w3"))
		require.NoError(t, err)
		require.NotEmpty(t, res.FulfilmentID)
	})

	t.Run("AnyRefundPolicyNeedsNoWeighing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(c *fulfilment.Config) { c.Reversals = actions.Policy{actions.AnyRefund} })
		b.settleEvent(t, paidEUR("evt_paid_any", "pi_w4"))
		_, err := b.svc.Accept(b.ctx, refundEUR("evt_part_any", "pi_w4", "re_1", 100))
		require.NoError(t, err)
		require.Equal(t, map[state.State]int{state.Pending: 1}, b.rows(t, "pi_w4", state.Revoke))
		require.Zero(t, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE refund_of IS NOT NULL`))
	})

	t.Run("TwoHalvesInTwoTransactionsAtOnce", func(t *testing.T) {
		t.Parallel()
		// Another process's transaction has stored one half and weighs the
		// payment, not yet committed, when the other half arrives here.
		// Without the payment's lock each would see only its own half and
		// neither would take the payment back.
		b := setup(t, func(c *fulfilment.Config) { c.Batch = 1 })
		b.settleEvent(t, paidEUR("evt_paid_halves", "pi_halves"))
		tx, err := b.db.Pool.Begin(b.ctx)
		require.NoError(t, err)
		defer tx.Rollback(b.ctx) //nolint:errcheck // committed below
		_, err = db.InsertEvents(b.ctx, tx, []db.BatchEvent{{Deliveries: 1, EventParams: db.EventParams{Provider: "stripe", EventID: "evt_half_a",
			Type: "refund.updated", Payload: []byte(`{}`), Reversal: "partial refund", Amount: &db.Amount{Minor: 500, Currency: "EUR"}, RefundOf: "pi_halves", RefundID: "re_a"}}})
		require.NoError(t, err)
		require.NoError(t, db.LockPayments(b.ctx, tx, []db.Payment{{Provider: "stripe", PaymentID: "pi_halves"}}))
		done := make(chan error, 1)
		go func() {
			_, err := b.svc.Accept(b.ctx, refundEUR("evt_half_b", "pi_halves", "re_b", 500))
			done <- err
		}()
		require.Eventually(t, func() bool {
			return b.db.Count(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`) == 1
		}, 10*time.Second, 5*time.Millisecond, "the second half waits for the payment's lock")
		require.NoError(t, tx.Commit(b.ctx))
		require.NoError(t, <-done)
		require.Equal(t, map[state.State]int{state.Pending: 1}, b.rows(t, "pi_halves", state.Revoke), "the two halves make the whole")
	})
}

// settleEvent accepts a paying event and dispatches its fulfilment to done.
func (b *testBundle) settleEvent(t *testing.T, ev provider.Event) string {
	t.Helper()
	res, err := b.svc.Accept(b.ctx, ev)
	require.NoError(t, err)
	require.NotEmpty(t, res.FulfilmentID)
	_, err = b.dispatch(t, res.FulfilmentID)
	require.NoError(t, err)
	require.Equal(t, state.Fulfilled, b.db.Fulfilment(t, res.FulfilmentID).State)
	return res.FulfilmentID
}
