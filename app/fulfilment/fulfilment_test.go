package fulfilment_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/connector/connectortest"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
	"github.com/guardian-pay/guardian/jobs"
)

// enqueuer records the dispatches the domain asked for. It stands in for
// River: these tests call Dispatch themselves. The statement that makes a
// payment's fulfilments writes their jobs into River's table itself
// (jobs.DispatchJobs), where count reads them.
type enqueuer struct {
	db     *dbtest.DB
	mu     sync.Mutex
	ids    []string
	routes []db.Payment
	// notifyEvery, when set, stands for River's fetch cooldown.
	notifyEvery time.Duration
	// topic, when set, replaces River's notification topic.
	topic string
}

// DispatchJobs names River's dispatch jobs as jobs.Enqueuer does.
func (e *enqueuer) DispatchJobs() db.DispatchJobs {
	j := jobs.DispatchJobs()
	if e.notifyEvery > 0 {
		j.NotifyEvery = e.notifyEvery
	}
	if e.topic != "" {
		j.Topic = e.topic
	}
	return j
}

func (e *enqueuer) EnqueueDispatchTx(_ context.Context, _ pgx.Tx, ids ...string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ids = append(e.ids, ids...)
	return nil
}

func (e *enqueuer) EnqueueRouteTx(_ context.Context, _ pgx.Tx, purchases ...db.Payment) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.routes = append(e.routes, purchases...)
	return nil
}

// count is how many dispatch jobs were asked for the fulfilment: those
// recorded, and those written beside it in River's table.
func (e *enqueuer) count(t testing.TB, id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'guardian_dispatch' AND args ->> 'fulfilment_id' = $1`, id)
	for _, got := range e.ids {
		if got == id {
			n++
		}
	}
	return n
}

type testBundle struct {
	ctx      context.Context
	db       *dbtest.DB
	rec      *connectortest.Recorder
	enqueuer *enqueuer
	svc      *fulfilment.Service
	// cfg is what svc was built from: another Service from it is another
	// process on the same database.
	cfg fulfilment.Config
}

// setup returns a Service on a fresh database with a recording connector
// and enqueuer; opts adjust its Config before it is built.
func setup(t *testing.T, opts ...func(*fulfilment.Config)) *testBundle {
	t.Helper()
	d := dbtest.NewDB(t)
	b := &testBundle{ctx: context.Background(), db: d, rec: &connectortest.Recorder{}, enqueuer: &enqueuer{db: d}}
	cfg := fulfilment.Config{
		Store: db.New(d.Pool), Enqueuer: b.enqueuer, Connector: b.rec,
		Logger:           slog.New(slog.DiscardHandler),
		ConnectorTimeout: time.Second, DispatchLease: 20 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	svc, err := fulfilment.New(cfg)
	require.NoError(t, err)
	b.svc, b.cfg = svc, cfg
	return b
}

// pay accepts a fulfilling Stripe event and returns its fulfilment's id.
func (b *testBundle) pay(t *testing.T, eventID, paymentID string) string {
	t.Helper()
	res, err := b.svc.Accept(b.ctx, providertest.Payment(eventID, paymentID))
	require.NoError(t, err)
	require.NotEmpty(t, res.FulfilmentID)
	return res.FulfilmentID
}

// dispatch runs one dispatch as a job would.
func (b *testBundle) dispatch(t *testing.T, id string) (fulfilment.DispatchResult, error) {
	t.Helper()
	return b.svc.Dispatch(b.ctx, fulfilment.DispatchRequest{FulfilmentID: id, Actor: "test dispatcher"})
}

// answer makes a connector that answers every call with o.
func answer(o state.Outcome) func(context.Context, connector.Request) connector.Result {
	return func(context.Context, connector.Request) connector.Result {
		return connector.Result{Outcome: o, Evidence: map[string]any{"connector": "recorder"}}
	}
}

// park leaves a fulfilment parked after one call of unknown outcome.
func (b *testBundle) park(t *testing.T, eventID, paymentID string) string {
	t.Helper()
	return b.settle(t, eventID, paymentID, state.Unknown, state.NeedsReconciliation)
}

// settle pays, dispatches once with the connector answering o, and checks
// the fulfilment ends in want.
func (b *testBundle) settle(t *testing.T, eventID, paymentID string, o state.Outcome, want state.State) string {
	t.Helper()
	id := b.pay(t, eventID, paymentID)
	b.rec.Answer = answer(o)
	_, err := b.dispatch(t, id)
	require.NoError(t, err)
	b.rec.Answer = nil
	require.Equal(t, want, b.db.Fulfilment(t, id).State)
	return id
}

// storm accepts evs all at once and returns each one's result and error.
func (b *testBundle) storm(t *testing.T, evs []provider.Event) ([]fulfilment.AcceptResult, []error) {
	t.Helper()
	return stormOn(t, b.svc, evs)
}

// stormOn accepts evs on svc all at once.
func stormOn(t *testing.T, svc *fulfilment.Service, evs []provider.Event) ([]fulfilment.AcceptResult, []error) {
	t.Helper()
	res, errs := make([]fulfilment.AcceptResult, len(evs)), make([]error, len(evs))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, ev := range evs {
		wg.Go(func() {
			<-start
			res[i], errs[i] = svc.Accept(context.Background(), ev)
		})
	}
	close(start)
	wg.Wait()
	return res, errs
}
