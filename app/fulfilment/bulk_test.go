package fulfilment_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/connector/connectortest"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

// fail leaves a fulfilment failed: the connector refused it.
func (b *testBundle) fail(t *testing.T, eventID, paymentID string) string {
	t.Helper()
	return b.settle(t, eventID, paymentID, state.Declined, state.Failed)
}

func TestRetryFailed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	failed := b.fail(t, "evt_f1", "pi_f1")
	held := b.fail(t, "evt_f2", "pi_f2")
	// A later event of another type holds pi_f2 again: a retry must not
	// make it a second live fulfilment.
	res, err := b.svc.Accept(b.ctx, providertest.Payment("evt_f2b", "pi_f2"))
	require.NoError(t, err)
	require.NotEmpty(t, res.FulfilmentID)
	live := b.pay(t, "evt_live", "pi_live")

	out, err := b.svc.Retry(b.ctx, []string{failed, held, live, "00000000-0000-4000-8000-000000000000", "nonsense", failed}, "alice")
	require.NoError(t, err)
	require.Len(t, out, 5, "a repeated id is one action")
	got := map[string]fulfilment.BulkResult{}
	for _, r := range out {
		got[r.ID] = r
	}
	require.Equal(t, fulfilment.RetryCreated, got[failed].Verdict)
	require.Equal(t, fulfilment.RetryPaymentHeld, got[held].Verdict)
	require.Equal(t, fulfilment.RetryNotFailed, got[live].Verdict)
	require.Equal(t, fulfilment.BulkNotFound, got["nonsense"].Verdict)
	require.Equal(t, fulfilment.BulkNotFound, got["00000000-0000-4000-8000-000000000000"].Verdict)

	// The effect: one new pending fulfilment of pi_f1, with its dispatch, on
	// the failed one's event, audited with the operator and the failed id.
	newID := got[failed].FulfilmentID
	f := b.db.Fulfilment(t, newID)
	require.Equal(t, state.Pending, f.State)
	require.Equal(t, "pi_f1", f.PaymentID)
	require.Equal(t, b.db.Fulfilment(t, failed).EventPK, f.EventPK)
	require.Equal(t, 1, b.enqueuer.count(t, newID))
	ts := b.db.Transitions(t, newID)
	require.Len(t, ts, 1)
	require.Equal(t, "operator alice", ts[0].Actor)
	require.Equal(t, "retry of failed fulfilment "+failed, ts[0].Reason)
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE payment_id = 'pi_f2'`), "nothing created for a held payment")
	require.Equal(t, state.Failed, b.db.Fulfilment(t, failed).State, "the failed row stays as it was")

	// Retrying again while the new one is live creates nothing.
	out, err = b.svc.Retry(b.ctx, []string{failed}, "bob")
	require.NoError(t, err)
	require.Equal(t, fulfilment.RetryPaymentHeld, out[0].Verdict)
}

// TestRetryFailedConcurrently: operators retrying the same failed
// fulfilments at once create one new fulfilment per payment.
func TestRetryFailedConcurrently(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []string
	for i := range 10 {
		ids = append(ids, b.fail(t, fmt.Sprintf("evt_c%d", i), fmt.Sprintf("pi_c%d", i)))
	}
	var wg sync.WaitGroup
	var created atomic.Int32
	for range 6 {
		wg.Go(func() {
			out, err := b.svc.Retry(context.Background(), ids, "racer")
			require.NoError(t, err)
			for _, r := range out {
				if r.Verdict == fulfilment.RetryCreated {
					created.Add(1)
				}
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 10, created.Load())
	require.Equal(t, 10, b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE state = 'pending'`))
}

func TestBulkRefusesTooManyOrNone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	many := make([]string, fulfilment.MaxBulk+1)
	for i := range many {
		many[i] = fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
	}
	for _, ids := range [][]string{nil, many} {
		_, err := b.svc.Retry(b.ctx, ids, "alice")
		require.ErrorIs(t, err, fulfilment.ErrInvalid)
		_, err = b.svc.Recheck(b.ctx, ids, "alice")
		require.ErrorIs(t, err, fulfilment.ErrInvalid)
	}
	_, err := b.svc.Retry(b.ctx, []string{many[0]}, "")
	require.ErrorIs(t, err, fulfilment.ErrInvalid)
	_, err = b.svc.Recheck(b.ctx, []string{many[0]}, "alice")
	require.ErrorIs(t, err, fulfilment.ErrNoLookup, "without a lookup there is nothing to re-check with")
}

func TestRecheckParked(t *testing.T) {
	t.Parallel()
	answers := map[string]connector.Answer{}
	var mu sync.Mutex
	var asked []string
	b := setup(t, func(c *fulfilment.Config) {
		c.ConnectorTimeout = 200 * time.Millisecond
		c.ReconcileGrace = 30 * time.Second
		c.ReconcileBackoff = time.Hour
		c.Looker = connectortest.LookerFunc(func(_ context.Context, key string) (connector.Answer, map[string]any, error) {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, key)
			return answers[key], map[string]any{"lookup": "fake"}, nil
		})
	})
	done := b.park(t, "evt_r1", "pi_r1")
	notDone := b.park(t, "evt_r2", "pi_r2")
	unsure := b.park(t, "evt_r3", "pi_r3")
	fresh := b.park(t, "evt_r4", "pi_r4") // parked just now: within the grace
	live := b.pay(t, "evt_r5", "pi_r5")
	for _, id := range []string{done, notDone, unsure} {
		b.db.Backdate(t, id, time.Now().Add(-time.Minute))
	}
	key := func(id string) string { return b.db.Fulfilment(t, id).Key }
	answers[key(done)], answers[key(notDone)], answers[key(unsure)] = connector.Performed, connector.NotPerformed, connector.CannotTell

	// The unsure one was looked up before and is backed off for an hour:
	// the reconciler would not ask again, a re-check does.
	sum, err := b.svc.Reconcile(b.ctx, "reconciler")
	require.NoError(t, err)
	require.Equal(t, 3, sum.Checked)
	require.Equal(t, state.NeedsReconciliation, b.db.Fulfilment(t, unsure).State)
	sum, err = b.svc.Reconcile(b.ctx, "reconciler")
	require.NoError(t, err)
	require.Zero(t, sum.Checked, "backed off")
	// Put the decided ones back where they were, as new parked rows.
	done2 := b.park(t, "evt_r6", "pi_r6")
	notDone2 := b.park(t, "evt_r7", "pi_r7")
	for _, id := range []string{done2, notDone2} {
		b.db.Backdate(t, id, time.Now().Add(-time.Minute))
	}
	answers[key(done2)], answers[key(notDone2)] = connector.Performed, connector.NotPerformed
	mu.Lock()
	asked = nil
	mu.Unlock()

	out, err := b.svc.Recheck(b.ctx, []string{done2, notDone2, unsure, fresh, live, done}, "carol")
	require.NoError(t, err)
	got := map[string]fulfilment.Verdict{}
	for _, r := range out {
		got[r.ID] = r.Verdict
	}
	require.Equal(t, map[string]fulfilment.Verdict{
		done2: fulfilment.CheckFulfilled, notDone2: fulfilment.CheckRedispatched,
		unsure: fulfilment.CheckUndecided, fresh: fulfilment.CheckWithinGrace,
		live: fulfilment.CheckNotParked, done: fulfilment.CheckNotParked,
	}, got)
	require.ElementsMatch(t, []string{key(done2), key(notDone2), key(unsure)}, asked, "only parked rows past the grace are looked up, by their keys")
	require.Equal(t, state.Fulfilled, b.db.Fulfilment(t, done2).State)
	require.Equal(t, state.Pending, b.db.Fulfilment(t, notDone2).State)
	require.Equal(t, state.NeedsReconciliation, b.db.Fulfilment(t, unsure).State)
	require.Equal(t, state.NeedsReconciliation, b.db.Fulfilment(t, fresh).State)

	// The audit: check rows and transitions name the operator.
	cs, err := db.Checks(b.ctx, b.db.Pool, unsure)
	require.NoError(t, err)
	require.Len(t, cs, 2)
	require.Equal(t, "operator carol", cs[1].Actor)
	ts := b.db.Transitions(t, done2)
	require.Equal(t, "operator carol", ts[len(ts)-1].Actor)
	require.Equal(t, "connector lookup: done", ts[len(ts)-1].Reason)
	require.Equal(t, 0, b.rec.CallsFor(unsure)-1, "a re-check never calls the connector's action")
}

// TestRecheckRespectsTheDeadline: a request with no time for a lookup
// starts none and says so.
func TestRecheckRespectsTheDeadline(t *testing.T) {
	t.Parallel()
	var asked atomic.Int32
	b := setup(t, func(c *fulfilment.Config) {
		c.ConnectorTimeout = time.Second
		c.ReconcileGrace = time.Second
		c.Looker = connectortest.LookerFunc(func(context.Context, string) (connector.Answer, map[string]any, error) {
			asked.Add(1)
			return connector.Performed, nil, nil
		})
	})
	id := b.park(t, "evt_d1", "pi_d1")
	b.db.Backdate(t, id, time.Now().Add(-time.Minute))
	ctx, cancel := context.WithTimeout(b.ctx, 100*time.Millisecond)
	defer cancel()
	out, err := b.svc.Recheck(ctx, []string{id}, "dave")
	require.NoError(t, err)
	require.Equal(t, fulfilment.CheckNotReached, out[0].Verdict)
	require.Zero(t, asked.Load())
	require.Equal(t, state.NeedsReconciliation, b.db.Fulfilment(t, id).State)
}

// TestRetryRacesTheProvider: while operators retry a failed payment, the
// provider delivers the payment's other event (Stripe sends
// payment_intent.succeeded beside checkout.session.completed, in any
// order): one live fulfilment, whoever wins.
func TestRetryRacesTheProvider(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var failed []string
	for i := range 8 {
		failed = append(failed, b.fail(t, fmt.Sprintf("evt_cs_%d", i), fmt.Sprintf("pi_race_%d", i)))
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			_, err := b.svc.Retry(context.Background(), failed, "racer")
			require.NoError(t, err)
		})
	}
	for i := range 8 {
		wg.Go(func() {
			_, err := b.svc.Accept(context.Background(), providertest.Payment(fmt.Sprintf("evt_pi_%d", i), fmt.Sprintf("pi_race_%d", i)))
			require.NoError(t, err)
		})
	}
	wg.Wait()
	for i := range 8 {
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE payment_id = $1 AND state <> 'failed'`, fmt.Sprintf("pi_race_%d", i)),
			"pi_race_%d has one live fulfilment", i)
	}
}

// TestRetryRacesRedeliveriesWithoutDeadlock: two operators retry the same
// failed payments while the provider redelivers each payment's first event
// (counted as a duplicate) and sends its other event, all at once, round
// after round. Intake used to lock the duplicate's event row FOR UPDATE and
// then wait on the retry's new fulfilment for the payment, while the
// retry's foreign-key check waited on that row: Postgres broke the
// deadlock (40P01) and the retry answered 503 for a request that had
// committed. Now no deadlock happens, every retry that committed says
// "retried", and each payment has one live fulfilment.
func TestRetryRacesRedeliveriesWithoutDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	deadlocks := func() int {
		var n int
		_, err := b.db.Pool.Exec(b.ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
		require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT pg_stat_clear_snapshot(), deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(nil, &n))
		return n
	}
	before := deadlocks()
	const payments = 12
	for round := range 4 {
		var failed []string
		for i := range payments {
			failed = append(failed, b.fail(t, fmt.Sprintf("evt_cs_%d_%d", round, i), fmt.Sprintf("pi_dl_%d_%d", round, i)))
		}
		var wg sync.WaitGroup
		var retried atomic.Int32
		for range 2 {
			wg.Go(func() {
				out, err := b.svc.Retry(context.Background(), failed, "racer")
				require.NoError(t, err)
				for _, r := range out {
					require.Contains(t, []fulfilment.Verdict{fulfilment.RetryCreated, fulfilment.RetryPaymentHeld}, r.Verdict, "%s", r.ID)
					if r.Verdict == fulfilment.RetryCreated {
						retried.Add(1)
					}
				}
			})
		}
		for i := range payments {
			for _, ev := range []provider.Event{
				providertest.Payment(fmt.Sprintf("evt_cs_%d_%d", round, i), fmt.Sprintf("pi_dl_%d_%d", round, i)), // a redelivery
				providertest.Payment(fmt.Sprintf("evt_pi_%d_%d", round, i), fmt.Sprintf("pi_dl_%d_%d", round, i)), // the other event
			} {
				wg.Go(func() {
					_, err := b.svc.Accept(context.Background(), ev)
					require.NoError(t, err)
				})
			}
		}
		wg.Wait()
		for i := range payments {
			require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE payment_id = $1 AND state <> 'failed'`, fmt.Sprintf("pi_dl_%d_%d", round, i)))
		}
		require.EqualValues(t, b.db.Count(t, `SELECT count(*) FROM fulfilment f JOIN fulfilment_transition t ON t.fulfilment_id = f.id
			WHERE f.payment_id LIKE $1 AND t.from_state IS NULL AND t.actor = 'operator racer'`, fmt.Sprintf("pi_dl_%d_%%", round)), retried.Load(),
			"every retry that committed was reported as retried")
	}
	require.Equal(t, before, deadlocks(), "Postgres broke no deadlock")
}

// TestBulkAnswersPerID: a retry whose transaction fails for one fulfilment
// reports that one as error and the others as what they did; the committed
// ones are never reported failed. Only when every one failed is the whole
// request an error.
func TestBulkAnswersPerID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	good := b.fail(t, "evt_ok", "pi_ok")
	poison := b.fail(t, "evt_poison", "pi_poison")
	_, err := b.db.Pool.Exec(b.ctx, `
		CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'disk full' USING ERRCODE = 'disk_full'; END $$;
		CREATE TRIGGER refuse_poison BEFORE INSERT ON fulfilment_identity FOR EACH ROW
			WHEN (NEW.payment_id = 'pi_poison') EXECUTE FUNCTION refuse_poison();`)
	require.NoError(t, err)

	out, err := b.svc.Retry(b.ctx, []string{poison, good}, "alice")
	require.NoError(t, err)
	require.Equal(t, fulfilment.BulkFailed, out[0].Verdict)
	require.Equal(t, fulfilment.RetryCreated, out[1].Verdict)
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE payment_id = 'pi_ok' AND state = 'pending'`))
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE payment_id = 'pi_poison' AND state <> 'failed'`))

	_, err = b.svc.Retry(b.ctx, []string{poison}, "alice")
	require.ErrorContains(t, err, "disk full", "nothing changed at all: the request failed")
}
