package fulfilment_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/provider"
)

// storm accepts evs all at once and returns each one's result and error.
func (b *testBundle) storm(t *testing.T, evs []provider.Event) ([]fulfilment.AcceptResult, []error) {
	t.Helper()
	res, errs := make([]fulfilment.AcceptResult, len(evs)), make([]error, len(evs))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, ev := range evs {
		wg.Go(func() {
			<-start
			res[i], errs[i] = b.svc.Accept(b.ctx, ev)
		})
	}
	close(start)
	wg.Wait()
	return res, errs
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
				ev := paymentEvent(fmt.Sprintf("evt_%s_%d", typ[:3], i), fmt.Sprintf("pi_%d", i))
				ev.Type = typ
				evs = append(evs, ev, ev)
			}
		}
		res, errs := b.storm(t, evs)
		outcomes := map[fulfilment.Outcome]int{}
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
			require.Equal(t, 1, b.enqueuer.count(id), "one dispatch job per fulfilment")
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
			evs = append(evs, paymentEvent(fmt.Sprintf("evt_%d", i), fmt.Sprintf("pi_%d", i)))
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
		require.Len(t, b.enqueuer.ids, 98, "one dispatch job per stored payment")
	})

	t.Run("OneBatchOneDeliveryWithoutBatching", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(c *fulfilment.Config) { c.Batch = 1 })
		var evs []provider.Event
		for i := range 40 {
			evs = append(evs, paymentEvent(fmt.Sprintf("evt_%d", i), fmt.Sprintf("pi_%d", i)))
		}
		_, errs := b.storm(t, evs)
		for _, err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, 40, b.db.Count(t, `SELECT count(DISTINCT xmin::text) FROM webhook_event`), "Batch 1: a transaction each")
	})
}

func TestDispatchBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var evs []provider.Event
	for i := range 120 {
		evs = append(evs, paymentEvent(fmt.Sprintf("evt_%d", i), fmt.Sprintf("pi_%d", i)))
	}
	res, errs := b.storm(t, evs)
	ids := make([]string, len(res))
	for i := range res {
		require.NoError(t, errs[i])
		ids[i] = res[i].FulfilmentID
	}
	// Every fulfilment dispatched at once, each by its own dispatcher, and
	// two dispatchers at once for the first ten (a duplicate job).
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make([]fulfilment.DispatchResult, len(ids)+10)
	derrs := make([]error, len(ids)+10)
	for i := range len(ids) + 10 {
		id := ids[i%len(ids)]
		wg.Go(func() {
			<-start
			results[i], derrs[i] = b.svc.Dispatch(b.ctx, fulfilment.DispatchRequest{FulfilmentID: id, Actor: "test", Claimant: fmt.Sprint("job ", i)})
		})
	}
	close(start)
	wg.Wait()
	called := 0
	for i := range results {
		require.NoError(t, derrs[i])
		if results[i].Called {
			called++
		}
	}
	require.Equal(t, 120, called, "each fulfilment called once, duplicates left to their claimant")
	for _, id := range ids {
		require.Equal(t, 1, b.rec.CallsFor(id))
		require.Equal(t, "fulfilled", string(b.db.Fulfilment(t, id).State))
	}
	claims := b.db.Count(t, `SELECT count(DISTINCT xmin::text) FROM fulfilment_transition WHERE to_state = 'dispatching'`)
	outcomes := b.db.Count(t, `SELECT count(DISTINCT xmin::text) FROM fulfilment_transition WHERE to_state = 'fulfilled'`)
	require.Less(t, claims, 120, "claims shared statements")
	require.Less(t, outcomes, 120, "outcomes shared statements")
	t.Logf("120 claims in %d statements, 120 outcomes in %d", claims, outcomes)
}
