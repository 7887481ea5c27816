package db_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
)

// TestPruneEventBodies: bodies past the retention are emptied only where
// nothing can need them again, a batch at a time from where the last walk
// stopped; identities stay; and a fulfilment is never made from a body a
// prune empties at the same moment.
func TestPruneEventBodies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("OnlyWhatNothingCanNeed", func(t *testing.T) {
		t.Parallel()
		d := dbtest.NewDB(t)
		store := db.New(d.Pool)
		exec := func(sql string, args ...any) {
			t.Helper()
			_, err := d.Pool.Exec(ctx, sql, args...)
			require.NoError(t, err)
		}
		event := func(id, payment, reverses string) int64 {
			t.Helper()
			var revokes []string
			if reverses != "" {
				revokes = []string{"fulfil"}
			}
			pk, _, err := insertEvent(ctx, d.Pool, db.EventParams{Provider: "stripe", EventID: id, Type: "t", PaymentID: payment, Reverses: reverses, Revokes: revokes, Payload: []byte(`{"buyer":"ana@example.com"}`)})
			require.NoError(t, err)
			return pk
		}
		settle := func(pk int64, to ...string) {
			t.Helper()
			id, created, err := db.InsertFulfilment(ctx, d.Pool, pk, "test", "payment event received")
			require.NoError(t, err)
			require.True(t, created)
			exec(`UPDATE fulfilment SET state = 'dispatching', attempt = attempt + 1 WHERE id = $1`, id)
			for _, st := range to {
				exec(`UPDATE fulfilment SET state = $2 WHERE id = $1`, id, st)
			}
		}
		noFulfilment := event("evt_other", "", "")
		fulfilled := event("evt_fulfilled", "pi_1", "")
		settle(fulfilled, "fulfilled")
		parked := event("evt_parked", "pi_2", "")
		settle(parked, "needs_reconciliation")
		failed := event("evt_failed", "pi_3", "")
		settle(failed, "failed")
		cancelled := event("evt_cancelled", "pi_4", "")
		settle(cancelled, "needs_reconciliation", "cancelled")
		reversalNoRevocation := event("evt_refund_waiting", "", "pi_2")
		recent := event("evt_recent", "", "")
		exec(`UPDATE webhook_event SET first_seen_at = now() - interval '100 days' WHERE id <> $1`, recent)
		require.NoError(t, recordPurchases(ctx, d.Pool, []db.PurchaseRecord{
			{Payment: db.Payment{Provider: "stripe", PaymentID: "pi_1"}, Actions: []string{"fulfil"}, Routes: "r", Detail: []byte(`{"customer":{"email":"ana@example.com"}}`)},
			{Payment: db.Payment{Provider: "stripe", PaymentID: "pi_2"}, Actions: []string{"fulfil"}, Routes: "r", Detail: []byte(`{"customer":{"email":"bo@example.com"}}`)},
		}))

		cutoff := time.Now().Add(-90 * 24 * time.Hour)
		total, rounds := 0, 0
		for {
			n, done, err := store.PruneEventBodies(ctx, cutoff, 2)
			require.NoError(t, err)
			total, rounds = total+n, rounds+1
			if done {
				break
			}
			require.Less(t, rounds, 10)
		}
		require.Equal(t, 2, total)
		require.Equal(t, 1, d.Count(t, `SELECT count(*) FROM purchase WHERE payment_id = 'pi_1' AND detail IS NULL`), "a purchase's detail goes with its payment's last body")
		require.Equal(t, 1, d.Count(t, `SELECT count(*) FROM purchase WHERE payment_id = 'pi_2' AND detail IS NOT NULL`), "and stays while a body stays")
		require.GreaterOrEqual(t, rounds, 3, "two events a walk")
		for pk, wantPruned := range map[int64]bool{noFulfilment: true, fulfilled: true, parked: false, failed: false, cancelled: false, reversalNoRevocation: false, recent: false} {
			var pruned bool
			var body []byte
			require.NoError(t, d.Pool.QueryRow(ctx, `SELECT pruned_at IS NOT NULL, body FROM webhook_event WHERE id = $1`, pk).Scan(&pruned, &body))
			require.Equal(t, wantPruned, pruned, "event %d", pk)
			require.Equal(t, wantPruned, len(body) == 0, "event %d", pk)
		}
		require.Equal(t, 7, d.Count(t, `SELECT count(*) FROM webhook_event`), "every identity stays")
		var cursor int64
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT last_id FROM prune_cursor WHERE name = 'event_body'`).Scan(&cursor))
		require.Equal(t, reversalNoRevocation, cursor, "the walk stops before the first recent event")

		n, done, err := store.PruneEventBodies(ctx, cutoff, 2)
		require.NoError(t, err)
		require.True(t, done)
		require.Zero(t, n, "a second walk rereads nothing")
	})

	t.Run("AFulfilmentIsNeverMadeFromAnEmptiedBody", func(t *testing.T) {
		t.Parallel()
		d := dbtest.NewDB(t)
		store := db.New(d.Pool)
		const rounds = 30
		for i := range rounds {
			pk, _, err := insertEvent(ctx, d.Pool, db.EventParams{Provider: "stripe", EventID: fmt.Sprintf("evt_race_%d", i), Type: "t",
				PaymentID: fmt.Sprintf("pi_race_%d", i), Payload: []byte(`{"buyer":"ana@example.com"}`)})
			require.NoError(t, err)
			_, err = d.Pool.Exec(ctx, `UPDATE webhook_event SET first_seen_at = now() - interval '100 days' WHERE id = $1`, pk)
			require.NoError(t, err)
			var wg sync.WaitGroup
			wg.Go(func() { // an operator's replay, or a retry
				_, _, err := db.InsertFulfilment(ctx, d.Pool, pk, "operator", "replay of stored event")
				require.NoError(t, err)
			})
			wg.Go(func() {
				_, _, err := store.PruneEventBodies(ctx, time.Now().Add(-90*24*time.Hour), 10)
				require.NoError(t, err)
			})
			wg.Wait()
		}
		require.Zero(t, d.Count(t, `SELECT count(*) FROM fulfilment f JOIN webhook_event e ON e.id = f.event_pk WHERE e.pruned_at IS NOT NULL AND f.state <> 'fulfilled'`),
			"no fulfilment waits on an emptied body")
		t.Logf("%d of %d events pruned, %d fulfilments made", d.Count(t, `SELECT count(*) FROM webhook_event WHERE pruned_at IS NOT NULL`), rounds, d.Count(t, `SELECT count(*) FROM fulfilment`))
	})
}

// TestFulfilmentIDsFollowTime: a fulfilment's id is a UUIDv7, so ids made
// later sort after ids made earlier and inserts append at the index's edge.
func TestFulfilmentIDsFollowTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := dbtest.NewDB(t)
	var ids []string
	for i := range 5 {
		pk, _, err := insertEvent(ctx, d.Pool, db.EventParams{Provider: "stripe", EventID: fmt.Sprintf("evt_%d", i), Type: "t", PaymentID: fmt.Sprintf("pi_%d", i), Payload: []byte(`{}`)})
		require.NoError(t, err)
		id, _, err := db.InsertFulfilment(ctx, d.Pool, pk, "test", "payment event received")
		require.NoError(t, err)
		require.Equal(t, byte('7'), id[14], "version 7: %s", id)
		require.Contains(t, "89ab", string(id[19]), "RFC 9562 variant: %s", id)
		ids = append(ids, id)
		time.Sleep(2 * time.Millisecond)
	}
	require.IsIncreasing(t, ids, "made later, sorted later")
	var ms int64
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT ('x' || substr(replace($1, '-', ''), 1, 12))::bit(48)::bigint`, ids[4]).Scan(&ms))
	require.WithinDuration(t, time.Now(), time.UnixMilli(ms), time.Minute, "its first 48 bits are the time it was made")
}
