package fulfilment_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

func TestAccept(t *testing.T) {
	t.Parallel()

	t.Run("NewEventCreatesOnePendingFulfilmentAndOneDispatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := b.svc.Accept(b.ctx, paymentEvent("evt_1", "pi_1"))
		require.NoError(t, err)
		require.Equal(t, fulfilment.NewEvent, res.Outcome)
		require.Equal(t, state.Pending, b.db.Fulfilment(t, res.FulfilmentID).State)
		require.Equal(t, 1, b.enqueuer.count(res.FulfilmentID))
		ts := b.db.Transitions(t, res.FulfilmentID)
		require.Len(t, ts, 1)
		require.Equal(t, "intake", ts[0].Actor)
	})

	t.Run("DuplicateIsCountedNotStored", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.pay(t, "evt_1", "pi_1")
		res, err := b.svc.Accept(b.ctx, paymentEvent("evt_1", "pi_1"))
		require.NoError(t, err)
		require.Equal(t, fulfilment.DuplicatePostgres, res.Outcome)
		require.Empty(t, res.FulfilmentID)
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM webhook_event`))
		require.Equal(t, 2, b.db.Count(t, `SELECT deliveries FROM webhook_event`))
		require.Equal(t, 1, b.enqueuer.count(id))
	})

	t.Run("SecondEventTypeForOnePaymentFulfilsOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.pay(t, "evt_1", "pi_1")
		ev := paymentEvent("evt_2", "pi_1")
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
				res, err := b.svc.Accept(b.ctx, paymentEvent("evt_1", "pi_1"))
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
				require.Equal(t, 1, b.enqueuer.count(id))
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
		require.Equal(t, 1, b.enqueuer.count(res.FulfilmentID))
	})

	t.Run("UnknownEventIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.svc.Replay(b.ctx, "stripe", "evt_missing", "alice")
		require.ErrorIs(t, err, db.ErrNotFound)
	})
}
