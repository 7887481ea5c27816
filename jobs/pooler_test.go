package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/connector/connectortest"
	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
	"github.com/guardian-pay/guardian/db/dbtest/pgbouncer"
	"github.com/guardian-pay/guardian/jobs"
	"github.com/guardian-pay/guardian/jobs/jobstest"
)

// TestDispatchBehindTransactionPooler runs intake, River and dispatch
// through a real PgBouncer in transaction mode with a single server
// connection, as GUARDIAN_DB_POOLER=transaction wires them: every payment,
// accepted all at once, is fulfilled once, a leader is elected, and River leaves no LISTEN on
// the server session (a LISTEN there would be lent to whichever client
// comes next, and its notifications to nobody).
func TestDispatchBehindTransactionPooler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := dbtest.NewDB(t)
	b := pgbouncer.Start(t, d.URL, 1)
	pool := b.Connect(t, d.URL, db.TransactionPooler, 8)
	through := &dbtest.DB{URL: b.URL(d.URL), Name: d.Name, Pool: pool}

	rec := &connectortest.Recorder{}
	st := jobstest.New(t, through, rec, jobstest.Options{Jobs: func(c *jobs.Config) {
		c.Pooler = db.TransactionPooler
	}})
	st.Start(t)
	const payments = 20
	// All at once: intake's batches, each BEGIN and COMMIT pipelined with
	// a statement, interleave on the one server connection.
	ids, errs := make([]string, payments), make([]error, payments)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			res, err := st.Service.Accept(ctx, providertest.Payment(fmt.Sprintf("evt_%d", i), fmt.Sprintf("pi_%d", i)))
			ids[i], errs[i] = res.FulfilmentID, err
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	for i, id := range ids {
		d.WaitState(t, id, state.Fulfilled)
		require.Equal(t, 1, rec.CallsForPayment(fmt.Sprintf("pi_%d", i)), "payment %d", i)
	}
	require.Eventually(t, func() bool { return d.Count(t, `SELECT count(*) FROM river_leader`) == 1 }, 15*time.Second, 50*time.Millisecond,
		"no leader elected through the pooler")
	// With one server connection, this query runs on the session every
	// River query ran on.
	var listening int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_listening_channels()`).Scan(&listening))
	require.Zero(t, listening, "River listened through a transaction pooler")
}
