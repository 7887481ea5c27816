package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/db/dbtest"
	"github.com/guardian-pay/guardian/jobs"
	"github.com/guardian-pay/guardian/jobs/jobstest"
)

type testBundle struct {
	ctx     context.Context
	db      *dbtest.DB
	service *fulfilment.Service
	client  *jobs.Client
	stack   *jobstest.Stack
}

type options = jobstest.Options

// setup builds the domain and Guardian's River clients on a fresh
// database, as the wiring does. With start false the client is not
// started, so a test can arrange rows before any worker sees them.
func setup(t *testing.T, conn connector.Connector, start bool, o options) *testBundle {
	t.Helper()
	d := dbtest.NewDB(t)
	st := jobstest.New(t, d, conn, o)
	b := &testBundle{ctx: context.Background(), db: d, service: st.Service, client: st.Client, stack: st}
	if start {
		b.start(t)
	}
	return b
}

func (b *testBundle) start(t *testing.T) {
	t.Helper()
	b.stack.Start(t)
}

// pay accepts a fulfilling event and returns its fulfilment id; its
// dispatch job is inserted in the same transaction.
func (b *testBundle) pay(t *testing.T, eventID, paymentID string) string {
	t.Helper()
	res, err := b.service.Accept(b.ctx, providertest.Payment(eventID, paymentID))
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
