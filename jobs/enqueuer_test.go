package jobs_test

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

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
