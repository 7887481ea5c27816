package jobs_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/connector/connectortest"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
	"github.com/guardian-pay/guardian/jobs"
)

// TestDispatchJobsNameTheJobsInserted: what the Enqueuer says its dispatch
// jobs are named is what it inserts, so the sweep finds a fulfilment's live
// job, and the names db writes into its look-up are refused when not plain.
func TestDispatchJobsNameTheJobsInserted(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	e, err := jobs.NewEnqueuer(d.Pool, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	const id = "0b8f2b4e-9a61-4c1e-9d3a-5f2c7a1e6b10"
	tx, err := d.Pool.Begin(t.Context())
	require.NoError(t, err)
	require.NoError(t, e.EnqueueDispatchTx(t.Context(), tx, id))
	require.NoError(t, tx.Commit(t.Context()))
	names := e.DispatchJobs()
	require.Equal(t, 1, d.Count(t, `SELECT count(*) FROM river_job WHERE kind = $1 AND args ->> $2 = $3`, names.Kind, names.IDArg, id))
	_, err = db.StrandedPending(t.Context(), d.Pool, db.DispatchJobs{Kind: "x' OR true --", IDArg: "fulfilment_id"}, 0, 1)
	require.ErrorContains(t, err, "lower-case names")
}

// TestDispatchJobsAreRiversOwn: the dispatch job a payment's fulfilments
// statement writes is the row River's own insert writes for the same
// fulfilment, column for column, and its insert notification wakes a
// working client's producer: with River's poll a minute away, the job is
// fetched and the payment fulfilled at once.
func TestDispatchJobsAreRiversOwn(t *testing.T) {
	t.Parallel()
	rec := &connectortest.Recorder{}
	b := setup(t, rec, false, options{Jobs: func(c *jobs.Config) { c.FetchPollInterval = time.Minute }})
	e, err := jobs.NewEnqueuer(b.db.Pool, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	b.start(t)
	// Past the dispatch producer's start (it records its queue) and its
	// first fetch, which polls once as it starts.
	require.Eventually(t, func() bool {
		return b.db.Count(t, `SELECT count(*) FROM river_queue WHERE name = 'dispatch'`) == 1
	}, 10*time.Second, 10*time.Millisecond)
	time.Sleep(300 * time.Millisecond)

	id := b.pay(t, "evt_1", "pi_1")
	b.db.WaitState(t, id, state.Fulfilled)
	b.waitJobs(t, `kind = 'guardian_dispatch' AND state = 'completed'`, 1)
	require.Equal(t, 1, rec.CallsFor(id))

	// River's insert of a job for the same fulfilment, beside the one the
	// statement wrote, in a transaction never committed: no worker sees it.
	tx, err := b.db.Pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	require.NoError(t, e.EnqueueDispatchTx(b.ctx, tx, id))
	row := func(where string) []any {
		r, err := tx.Query(b.ctx, `SELECT args, kind, queue, priority, max_attempts, tags, metadata, unique_key, unique_states
			FROM river_job WHERE args ->> 'fulfilment_id' = $1 AND `+where+` ORDER BY id LIMIT 1`, id)
		require.NoError(t, err)
		require.True(t, r.Next())
		cols, err := r.Values()
		require.NoError(t, err)
		r.Close()
		return cols
	}
	ours, rivers := row(`state = 'completed'`), row(`state = 'available'`)
	require.Equal(t, rivers, ours, "args, kind, queue, priority, max_attempts, tags, metadata, unique_key, unique_states")
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'guardian_dispatch'`), "River's own row was never committed")
}

// TestInsertNotificationsAreLimited: payments accepted one after another
// send River's insert notification at most once in FetchCooldown, as
// River's own insert does, and the first is sent at once; the jobs of the
// last cooldown are announced at its end (fulfilment's
// TestNewJobsAreAnnouncedOnceCommitted).
func TestInsertNotificationsAreLimited(t *testing.T) {
	t.Parallel()
	b := setup(t, &connectortest.Recorder{}, false, options{})
	next := b.db.Listen(t, jobs.DispatchJobs().Topic)

	const n = 40
	start := time.Now()
	for i := range n {
		b.pay(t, fmt.Sprintf("evt_%d", i), fmt.Sprintf("pi_%d", i))
	}
	elapsed := time.Since(start)
	got := 0
	for {
		payload, ok := next(300 * time.Millisecond)
		if !ok {
			break
		}
		require.JSONEq(t, `{"queue": "dispatch"}`, payload)
		got++
	}
	require.Equal(t, n, b.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'guardian_dispatch'`))
	require.GreaterOrEqual(t, got, 1, "the first payment's job is notified")
	require.LessOrEqual(t, got, int(elapsed/jobs.FetchCooldown)+2, "%d notifications in %s and the cooldown after it", got, elapsed)
	require.Less(t, got, n)
}
