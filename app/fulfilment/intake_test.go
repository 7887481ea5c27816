package fulfilment_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

func TestAccept(t *testing.T) {
	t.Parallel()

	t.Run("NewEventCreatesOnePendingFulfilmentAndOneDispatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := b.svc.Accept(b.ctx, providertest.Payment("evt_1", "pi_1"))
		require.NoError(t, err)
		require.Equal(t, fulfilment.NewEvent, res.Outcome)
		require.Equal(t, state.Pending, b.db.Fulfilment(t, res.FulfilmentID).State)
		require.Equal(t, 1, b.enqueuer.count(t, res.FulfilmentID))
		ts := b.db.Transitions(t, res.FulfilmentID)
		require.Len(t, ts, 1)
		require.Equal(t, "intake", ts[0].Actor)
	})

	t.Run("DuplicateIsCountedNotStored", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.pay(t, "evt_1", "pi_1")
		res, err := b.svc.Accept(b.ctx, providertest.Payment("evt_1", "pi_1"))
		require.NoError(t, err)
		require.Equal(t, fulfilment.DuplicatePostgres, res.Outcome)
		require.Empty(t, res.FulfilmentID)
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM webhook_event`))
		require.Equal(t, 2, b.db.Count(t, `SELECT deliveries FROM webhook_event`))
		require.Equal(t, 1, b.enqueuer.count(t, id))
	})

	t.Run("SecondEventTypeForOnePaymentFulfilsOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.pay(t, "evt_1", "pi_1")
		ev := providertest.Payment("evt_2", "pi_1")
		ev.Type = "checkout.session.completed"
		res, err := b.svc.Accept(b.ctx, ev)
		require.NoError(t, err)
		require.Equal(t, fulfilment.NewEvent, res.Outcome)
		require.Empty(t, res.FulfilmentID)
		require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM webhook_event`))
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment`))
	})

	t.Run("NonFulfillingTypeIsStoredOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := b.svc.Accept(b.ctx, provider.Event{Provider: "stripe", ID: "evt_c", Type: "customer.updated", Payload: []byte(`{}`)})
		require.NoError(t, err)
		require.Equal(t, fulfilment.NewEvent, res.Outcome)
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM webhook_event`))
		require.Zero(t, b.db.Count(t, `SELECT count(*) FROM fulfilment`))
	})

	t.Run("ConcurrentDeliveriesOfOneEventStoreOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const n = 32
		var wg sync.WaitGroup
		ids := make(chan string, n)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := b.svc.Accept(b.ctx, providertest.Payment("evt_1", "pi_1"))
				require.NoError(t, err)
				ids <- res.FulfilmentID
			}()
		}
		wg.Wait()
		close(ids)
		created := 0
		for id := range ids {
			if id != "" {
				created++
				require.Equal(t, 1, b.enqueuer.count(t, id))
			}
		}
		require.Equal(t, 1, created)
		require.Equal(t, n, b.db.Count(t, `SELECT deliveries FROM webhook_event`))
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment`))
	})
}

func TestReplay(t *testing.T) {
	t.Parallel()

	t.Run("FulfilledPaymentIsNotFulfilledAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.pay(t, "evt_1", "pi_1")
		_, err := b.dispatch(t, id)
		require.NoError(t, err)
		res, err := b.svc.Replay(b.ctx, "stripe", "evt_1", "alice")
		require.NoError(t, err)
		require.True(t, res.Fulfils)
		require.Empty(t, res.FulfilmentID)
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment`))
	})

	t.Run("FailedPaymentIsFreeForAReplay", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.pay(t, "evt_1", "pi_1")
		b.rec.Answer = answer(state.Declined)
		_, err := b.dispatch(t, id)
		require.NoError(t, err)
		require.Equal(t, state.Failed, b.db.Fulfilment(t, id).State)
		res, err := b.svc.Replay(b.ctx, "stripe", "evt_1", "alice")
		require.NoError(t, err)
		require.NotEmpty(t, res.FulfilmentID)
		require.NotEqual(t, id, res.FulfilmentID)
		require.Equal(t, 1, b.enqueuer.count(t, res.FulfilmentID))
	})

	t.Run("UnknownEventIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.svc.Replay(b.ctx, "stripe", "evt_missing", "alice")
		require.ErrorIs(t, err, db.ErrNotFound)
	})
}

func TestIntakeBatches(t *testing.T) {
	t.Parallel()

	t.Run("ConcurrentDeliveriesShareCommitsAndKeepTheInvariants", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// 150 payments, each with two event types, each delivered twice:
		// 600 deliveries at once.
		var evs []provider.Event
		for i := range 150 {
			for _, typ := range []string{"checkout.session.completed", "payment_intent.succeeded"} {
				ev := providertest.Payment(fmt.Sprintf("evt_%s_%d", typ[:3], i), fmt.Sprintf("pi_%d", i))
				ev.Type = typ
				evs = append(evs, ev, ev)
			}
		}
		res, errs := b.storm(t, evs)
		outcomes := map[fulfilment.IntakeOutcome]int{}
		created := map[string]bool{}
		for i := range res {
			require.NoError(t, errs[i])
			outcomes[res[i].Outcome]++
			if res[i].FulfilmentID != "" {
				require.False(t, created[res[i].FulfilmentID])
				created[res[i].FulfilmentID] = true
			}
		}
		require.Equal(t, 300, outcomes[fulfilment.NewEvent], "each event stored by exactly one delivery")
		require.Equal(t, 300, outcomes[fulfilment.DuplicatePostgres])
		require.Len(t, created, 150, "one fulfilment per payment")
		require.Equal(t, 300, b.db.Count(t, `SELECT count(*) FROM webhook_event`))
		require.Equal(t, 600, b.db.Count(t, `SELECT sum(deliveries)::int FROM webhook_event`), "every delivery counted")
		require.Equal(t, 150, b.db.Count(t, `SELECT count(*) FROM fulfilment`))
		require.Equal(t, 150, b.db.Count(t, `SELECT count(*) FROM fulfilment_transition`))
		for id := range created {
			require.Equal(t, 1, b.enqueuer.count(t, id), "one dispatch job per fulfilment")
		}
		// Rows written by one transaction share its xmin: fewer
		// transactions than events means deliveries shared commits.
		commits := b.db.Count(t, `SELECT count(DISTINCT xmin::text) FROM webhook_event`)
		require.Less(t, commits, 300, "deliveries were batched")
		t.Logf("300 events in %d intake transactions", commits)
	})

	t.Run("APoisonRowFailsOnlyItself", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var evs []provider.Event
		for i := range 100 {
			evs = append(evs, providertest.Payment(fmt.Sprintf("evt_%d", i), fmt.Sprintf("pi_%d", i)))
		}
		// Postgres text cannot hold NUL: these rows fail any statement
		// they are in.
		poison := map[int]bool{17: true, 60: true}
		for i := range poison {
			evs[i].ID = fmt.Sprintf("evt_poison\x00%d", i)
		}
		res, errs := b.storm(t, evs)
		for i := range evs {
			if poison[i] {
				require.Error(t, errs[i], "the poison row is refused")
				continue
			}
			require.NoError(t, errs[i], "delivery %d failed with its batch's poison row", i)
			require.Equal(t, fulfilment.NewEvent, res[i].Outcome)
			require.NotEmpty(t, res[i].FulfilmentID)
		}
		require.Equal(t, 98, b.db.Count(t, `SELECT count(*) FROM webhook_event`))
		require.Equal(t, 98, b.db.Count(t, `SELECT count(*) FROM fulfilment`))
		require.Equal(t, 98, b.db.Count(t, `SELECT count(*) FROM river_job j JOIN fulfilment f ON j.args ->> 'fulfilment_id' = f.id::text
			WHERE j.kind = 'guardian_dispatch' AND j.queue = 'dispatch' AND j.state = 'available'`), "one dispatch job per stored payment")
	})

	// A batch of plain events is one round trip: BEGIN, the events, the
	// fulfilments with their jobs, the known events counted and COMMIT
	// (db.RecordPlainBatch), with new payments and deliveries of known
	// ones alike. One with a reversal takes back after the fulfilments are
	// made, the longer way, in their transaction.
	t.Run("APlainBatchIsOneRoundTrip", func(t *testing.T) {
		t.Parallel()
		// River's workers are told of the first payment's job, in a round
		// trip of its own after its commit, and of no other's for an hour.
		b := setup(t, func(c *fulfilment.Config) { c.Enqueuer.(*enqueuer).notifyEvery = time.Hour })
		notified := b.listen(t)
		pool, writes := b.db.CountedPool(t, pgx.QueryExecModeCacheStatement)
		cfg := b.cfg
		cfg.Store = db.New(pool)
		svc, err := fulfilment.New(cfg)
		require.NoError(t, err)
		accept := func(evs ...provider.Event) ([]fulfilment.AcceptResult, int64) {
			n0 := writes.Load()
			res, errs := stormOn(t, svc, evs)
			for i := range evs {
				require.NoError(t, errs[i])
			}
			return res, writes.Load() - n0
		}
		accept(providertest.Payment("evt_warm", "pi_warm")) // prepares the statements
		_, ok := notified(5 * time.Second)
		require.True(t, ok)
		res, n := accept(providertest.Payment("evt_1", "pi_1"))
		require.EqualValues(t, 1, n, "a batch of one")
		require.Equal(t, fulfilment.NewEvent, res[0].Outcome)
		require.NotEmpty(t, res[0].FulfilmentID)
		var evs []provider.Event
		for i := range 8 {
			evs = append(evs, providertest.Payment(fmt.Sprintf("evt_many_%d", i), fmt.Sprintf("pi_many_%d", i)))
		}
		_, n = accept(evs...)
		require.Equal(t, 10, b.queued(t), "a job for each")
		// Rows one transaction wrote share its xmin: the batches' count.
		batches := b.db.Count(t, `SELECT count(DISTINCT xmin::text)::int FROM webhook_event WHERE event_id LIKE 'evt_many_%'`)
		require.EqualValues(t, batches, n, "one round trip per batch (%d batches)", batches)
		require.Less(t, batches, len(evs), "deliveries were batched")
		// Known events delivered again beside new ones: counted, made
		// nothing, in the same round trip.
		evs = evs[:4]
		for i := range 4 {
			evs = append(evs, providertest.Payment(fmt.Sprintf("evt_again_%d", i), fmt.Sprintf("pi_again_%d", i)))
		}
		res, n = accept(evs...)
		for i, r := range res {
			require.Equal(t, map[bool]fulfilment.IntakeOutcome{true: fulfilment.DuplicatePostgres, false: fulfilment.NewEvent}[i < 4], r.Outcome, "delivery %d", i)
		}
		batches = b.db.Count(t, `SELECT count(DISTINCT xmin::text)::int FROM webhook_event WHERE event_id LIKE 'evt_again_%' OR deliveries = 2`)
		require.EqualValues(t, batches, n, "one round trip per batch (%d batches)", batches)
		require.Equal(t, 4, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id LIKE 'evt_many_%' AND deliveries = 2`), "each known one counted once")
		require.Equal(t, 14, b.db.Count(t, `SELECT count(*) FROM fulfilment`), "nothing made for a known event")
		// New payments and a reversal in the same batches: what is taken
		// back after the fulfilments are made is in their transaction.
		evs = []provider.Event{reversal("evt_refund_1", "pi_1", fullRefund)}
		for i := range 8 {
			evs = append(evs, providertest.Payment(fmt.Sprintf("evt_more_%d", i), fmt.Sprintf("pi_more_%d", i)))
		}
		accept(evs...)
		require.Equal(t, map[state.State]int{state.Cancelled: 1}, b.rows(t, "pi_1", state.Fulfil), "taken back")
		require.Equal(t, 21, b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE state = 'pending'`), "the warm-up's and twenty new payments'")
	})

	t.Run("OneBatchOneDeliveryWithoutBatching", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(c *fulfilment.Config) { c.Batch = 1 })
		var evs []provider.Event
		for i := range 40 {
			evs = append(evs, providertest.Payment(fmt.Sprintf("evt_%d", i), fmt.Sprintf("pi_%d", i)))
		}
		_, errs := b.storm(t, evs)
		for _, err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, 40, b.db.Count(t, `SELECT count(DISTINCT xmin::text) FROM webhook_event`), "Batch 1: a transaction each")
	})
}

// TestReplayMapsAnUnmappedEventAgain: a paid event the sender shaped
// differently from the configured payment path is stored flagged; once the
// path is fixed, the operator's replay maps it by the rules as they are
// now, clears the flag and fulfils it, once.
func TestReplayMapsAnUnmappedEventAgain(t *testing.T) {
	t.Parallel()
	fixed, err := provider.NewStandard(provider.StandardConfig{Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, PaymentPath: "data.object.payment.id"})
	require.NoError(t, err)
	b := setup(t, func(c *fulfilment.Config) { c.Mappers = map[string]provider.Mapper{"standard": fixed} })
	body := []byte(`{"type":"payment.succeeded","data":{"object":{"payment":{"id":"pay_42"}}}}`)
	res, err := b.svc.Accept(b.ctx, provider.Event{Provider: "standard", ID: "msg_1", Type: "payment.succeeded", Payload: body, Unmapped: "no string payment id at data.payment_id"})
	require.NoError(t, err)
	require.Empty(t, res.FulfilmentID)
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE unmapped IS NOT NULL`))

	rep, err := b.svc.Replay(b.ctx, "standard", "msg_1", "ana")
	require.NoError(t, err)
	require.NotEmpty(t, rep.FulfilmentID, "mapped by the fixed path, and fulfilled")
	require.Equal(t, "pay_42", b.db.Fulfilment(t, rep.FulfilmentID).PaymentID)
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM webhook_event WHERE unmapped IS NOT NULL`), "the flag is cleared")

	again, err := b.svc.Replay(b.ctx, "standard", "msg_1", "ana")
	require.NoError(t, err)
	require.Empty(t, again.FulfilmentID, "replayed again: the payment is held")
}
