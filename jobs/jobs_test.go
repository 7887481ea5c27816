package jobs_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/lock"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
	"github.com/guardian-pay/guardian/jobs"
)

type testBundle struct {
	ctx     context.Context
	db      *dbtest.DB
	service *fulfilment.Service
	client  *jobs.Client
}

type options struct {
	fulfilment func(*fulfilment.Config)
	jobs       func(*jobs.Config)
}

// setup builds the domain and Guardian's River clients on a fresh
// database, as the wiring does. With start false the client is not
// started, so a test can arrange rows before any worker sees them.
func setup(t *testing.T, conn connector.Connector, start bool, o options) *testBundle {
	t.Helper()
	ctx := context.Background()
	d := dbtest.NewDB(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	enqueuer, err := jobs.NewEnqueuer(d.Pool, logger)
	require.NoError(t, err)
	store := db.New(d.Pool)
	fcfg := fulfilment.Config{
		Store: store, Enqueuer: enqueuer, Logger: logger, Connector: conn,
		ConnectorTimeout: 300 * time.Millisecond, DispatchLease: 20 * time.Second,
	}
	if o.fulfilment != nil {
		o.fulfilment(&fcfg)
	}
	service, err := fulfilment.New(fcfg)
	require.NoError(t, err)
	jcfg := jobs.Config{
		Pool: d.Pool, Logger: logger, Service: service, Locker: lock.Postgres{Store: store},
		DispatchLease: fcfg.DispatchLease, FetchPollInterval: 20 * time.Millisecond,
	}
	if o.jobs != nil {
		o.jobs(&jcfg)
	}
	client, err := jobs.New(jcfg)
	require.NoError(t, err)
	b := &testBundle{ctx: ctx, db: d, service: service, client: client}
	if start {
		b.start(t)
	}
	return b
}

func (b *testBundle) start(t *testing.T) {
	t.Helper()
	require.NoError(t, b.client.Start(b.ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, b.client.Stop(ctx))
	})
}

// pay accepts a fulfilling event and returns its fulfilment id; its
// dispatch job is inserted in the same transaction.
func (b *testBundle) pay(t *testing.T, eventID, paymentID string) string {
	t.Helper()
	res, err := b.service.Accept(b.ctx, provider.Event{Provider: "stripe", ID: eventID, Type: "payment_intent.succeeded", PaymentID: paymentID, Payload: []byte(`{"id":"` + eventID + `"}`)})
	require.NoError(t, err)
	require.NotEmpty(t, res.FulfilmentID)
	return res.FulfilmentID
}

// waitJobs waits until count(*) of river_job matching where reaches n.
func (b *testBundle) waitJobs(t *testing.T, where string, n int, args ...any) {
	t.Helper()
	require.Eventually(t, func() bool {
		return b.db.Count(t, `SELECT count(*) FROM river_job WHERE `+where, args...) >= n
	}, 15*time.Second, 10*time.Millisecond, "river_job where %s never reached %d", where, n)
}
