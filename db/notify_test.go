package db_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
)

// TestJobsAreNotifiedOnlyByNotifyJobs: the statements that write dispatch
// jobs beside their fulfilments, both ways of making them, notify nobody
// (a notifying commit would hold Postgres's notification lock through its
// flush, and every other process's notifying commits with it); NotifyJobs,
// sent after, tells River's producers of the queue on the channel they
// listen on, and NotifyOnCommit sends it once a pipelined transaction has
// committed.
func TestJobsAreNotifiedOnlyByNotifyJobs(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	ctx := context.Background()
	jobs := db.DispatchJobs{Kind: "guardian_dispatch", IDArg: "fulfilment_id", Queue: "dispatch", Priority: 1, MaxAttempts: 25, Topic: "river_insert"}

	next := d.Listen(t, jobs.Topic)

	paid := func(id string) db.BatchEvent {
		return db.BatchEvent{Deliveries: 1, EventParams: db.EventParams{Provider: "stripe", EventID: id, Type: "t", PaymentID: "pi_" + id, Payload: []byte(`{}`)},
			Purchase: &db.PurchaseRecord{Payment: db.Payment{Provider: "stripe", PaymentID: "pi_" + id}, Actions: []string{"licence"}, Routes: "r"}}
	}
	birth := db.Birth{Reason: "test", Jobs: jobs}
	store := db.New(d.Pool)
	require.NoError(t, store.InPipelinedTx(ctx, func(tx pgx.Tx) error {
		db.CommitWithNext(tx)
		_, born, err := db.RecordPlainBatch(ctx, tx, []db.BatchEvent{paid("evt_plain")}, []string{"test"}, birth)
		require.Len(t, born, 1)
		return err
	}))
	require.NoError(t, store.InTx(ctx, func(tx pgx.Tx) error {
		stored, err := db.InsertEvents(ctx, tx, []db.BatchEvent{paid("evt_long")})
		if err != nil {
			return err
		}
		born, err := db.InsertFulfilments(ctx, tx, []db.BatchFulfilment{{EventPK: stored[0].ID, Actor: "test"}}, birth)
		require.Len(t, born, 1)
		return err
	}))
	require.Equal(t, 2, d.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'guardian_dispatch' AND state = 'available'`))
	_, got := next(300 * time.Millisecond)
	require.False(t, got, "a statement that writes jobs notified")

	require.NoError(t, db.NotifyJobs(ctx, d.Pool, jobs))
	payload, got := next(5 * time.Second)
	require.True(t, got, "NotifyJobs notified nobody")
	require.JSONEq(t, `{"queue": "dispatch"}`, payload)

	// NotifyOnCommit: the notification goes out after the COMMIT a
	// statement carries, in its round trip, or after an explicit Commit,
	// and its caller is told it went; a transaction rolled back sends
	// none, and its caller is told nothing.
	var told []error
	done := func(err error) { told = append(told, err) }
	counted, writes := countedStore(t, d, pgx.QueryExecModeCacheStatement)
	for _, id := range []string{"evt_prepares", "evt_carried"} {
		n0 := writes.Load()
		require.NoError(t, counted.InPipelinedTx(ctx, func(tx pgx.Tx) error {
			db.NotifyOnCommit(tx, jobs, done)
			db.CommitWithNext(tx)
			_, born, err := db.RecordPlainBatch(ctx, tx, []db.BatchEvent{paid(id)}, []string{"test"}, birth)
			require.Len(t, born, 1)
			return err
		}))
		if id == "evt_carried" {
			require.EqualValues(t, 1, writes.Load()-n0, "BEGIN, the batch, COMMIT and the notification in one round trip")
		}
		_, got = next(5 * time.Second)
		require.True(t, got, "the notification after a statement's COMMIT")
	}
	require.NoError(t, counted.InPipelinedTx(ctx, func(tx pgx.Tx) error {
		db.NotifyOnCommit(tx, jobs, done)
		_, err := db.InsertEvents(ctx, tx, []db.BatchEvent{paid("evt_committed")})
		return err
	}))
	_, got = next(5 * time.Second)
	require.True(t, got, "the notification after Commit")
	require.Equal(t, []error{nil, nil, nil}, told, "each notification sent is told as sent")
	require.Error(t, counted.InPipelinedTx(ctx, func(tx pgx.Tx) error {
		db.NotifyOnCommit(tx, jobs, done)
		if _, err := db.InsertEvents(ctx, tx, []db.BatchEvent{paid("evt_rolled_back")}); err != nil {
			return err
		}
		return errors.New("rolled back")
	}))
	_, got = next(300 * time.Millisecond)
	require.False(t, got, "a transaction rolled back notified")
	require.NoError(t, store.InTx(ctx, func(tx pgx.Tx) error {
		db.NotifyOnCommit(tx, jobs, done) // not a pipelined transaction: nothing to carry it
		_, err := db.InsertEvents(ctx, tx, []db.BatchEvent{paid("evt_in_tx")})
		return err
	}))
	_, got = next(300 * time.Millisecond)
	require.False(t, got, "a transaction not pipelined notified")
	require.Len(t, told, 3, "a notification never sent was told")

	// A notification that fails (Postgres refuses a channel name longer
	// than 63 bytes) leaves its transaction committed, and its caller is
	// told why, whichever way the COMMIT went.
	refused := jobs
	refused.Topic = strings.Repeat("x", 64)
	for _, id := range []string{"evt_refused_carried", "evt_refused_committed"} {
		require.NoError(t, counted.InPipelinedTx(ctx, func(tx pgx.Tx) error {
			db.NotifyOnCommit(tx, refused, done)
			if id == "evt_refused_carried" {
				db.CommitWithNext(tx)
			}
			_, err := db.InsertEvents(ctx, tx, []db.BatchEvent{paid(id)})
			return err
		}), "a failed notification failed its committed transaction")
		require.Equal(t, 1, d.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = $1`, id), "the transaction was not committed")
		require.Len(t, told, 4)
		require.ErrorContains(t, told[3], "channel name too long")
		told = told[:3]
	}
}
