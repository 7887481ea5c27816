package db_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
)

// TestPlainBatchIsOneRoundTrip: RecordPlainBatch, in a pipelined
// transaction with its COMMIT named, is one write on the wire, BEGIN to
// COMMIT, in both of pgx's modes Guardian runs. It stores the new events
// with their purchases, makes the fulfilments of the new ones that have
// an actor and of no other (a known event's delivery only counts), and
// answers as InsertEvents and InsertFulfilments do.
func TestPlainBatchIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	ctx := context.Background()
	ev := func(id, payment string, actions ...string) db.BatchEvent {
		e := db.BatchEvent{Deliveries: 1, EventParams: db.EventParams{Provider: "stripe", EventID: id, Type: "t", PaymentID: payment, Payload: []byte(`{}`)}}
		if len(actions) > 0 {
			e.Purchase = &db.PurchaseRecord{Payment: db.Payment{Provider: "stripe", PaymentID: payment}, Actions: actions, Routes: "r"}
		}
		return e
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		t.Run(mode.String(), func(t *testing.T) {
			p := mode.String() + "_"
			store, writes := countedStore(t, d, mode)
			record := func(events []db.BatchEvent, actors []string) ([]db.BatchEventResult, []db.Born, int64) {
				var stored []db.BatchEventResult
				var born []db.Born
				n0 := writes.Load()
				require.NoError(t, store.InPipelinedTx(ctx, func(tx pgx.Tx) error {
					db.CommitWithNext(tx)
					var err error
					stored, born, err = db.RecordPlainBatch(ctx, tx, events, actors, db.Birth{Reason: "test"})
					return err
				}))
				return stored, born, writes.Load() - n0
			}
			record([]db.BatchEvent{ev(p+"evt_known", p+"pi_known", "licence")}, []string{"test"}) // and prepares the statements
			stored, born, n := record([]db.BatchEvent{
				ev(p+"evt_a", p+"pi_a", "licence", "seat"),
				ev(p+"evt_known", p+"pi_known", "licence"),
				ev(p+"evt_note", p+"pi_note"),
			}, []string{"test", "test", ""})
			require.EqualValues(t, 1, n, "BEGIN, three statements and COMMIT in one round trip")
			require.Len(t, stored, 3)
			require.True(t, stored[0].Inserted && !stored[1].Inserted && stored[2].Inserted, "new, known, new")
			require.NotZero(t, stored[1].ID, "the known event is found")
			require.Len(t, born, 2, "the new payment's two actions, nothing for the known one, nothing without an actor")
			for _, b := range born {
				require.Equal(t, stored[0].ID, b.EventPK)
			}
			require.Equal(t, 2, d.Count(t, `SELECT deliveries FROM webhook_event WHERE event_id = $1`, p+"evt_known"), "the known event's delivery counted")
			require.Equal(t, 1, d.Count(t, `SELECT deliveries FROM webhook_event WHERE event_id = $1`, p+"evt_a"))
			require.Equal(t, 1, d.Count(t, `SELECT count(*) FROM fulfilment WHERE payment_id = $1`, p+"pi_known"), "made once")
			require.Equal(t, 2, d.Count(t, `SELECT count(*) FROM fulfilment_transition tr JOIN fulfilment f ON f.id = tr.fulfilment_id
				WHERE f.payment_id = $1 AND tr.to_state = 'pending' AND tr.actor = 'test'`, p+"pi_a"))
			require.Equal(t, 1, d.Count(t, `SELECT count(*) FROM purchase WHERE payment_id = $1 AND actions = '{licence,seat}'`, p+"pi_a"))
			require.Zero(t, d.Count(t, `SELECT count(*) FROM fulfilment WHERE payment_id = $1`, p+"pi_note"))
			if mode != pgx.QueryExecModeCacheStatement {
				return // unnamed statements are planned at each run
			}
			// Batches of one, each statement's plan the generic one: left
			// to choose, Postgres planned them anew at every run.
			for i := range 6 {
				record([]db.BatchEvent{ev(fmt.Sprintf("%sevt_one_%d", p, i), fmt.Sprintf("%spi_one_%d", p, i), "licence")}, []string{"test"})
			}
			var custom, generic int
			require.NoError(t, store.Pool().QueryRow(ctx, `SELECT coalesce(sum(custom_plans), 0)::int, coalesce(sum(generic_plans), 0)::int
				FROM pg_prepared_statements WHERE statement LIKE '%pg_current_xact_id%' OR statement LIKE '%guardian_require%'`).Scan(&custom, &generic))
			require.Zero(t, custom, "no statement of a plain batch planned for its arguments")
			require.GreaterOrEqual(t, generic, 3*6, "each of the three ran on its generic plan")
		})
	}
}

// TestPlainBatchRefusesRefundsStoredFirst: a plain batch one of whose new
// events is the paid event of a payment with a refund stored before it
// commits nothing and answers ErrNotPlain, for the longer path to weigh
// the refund first; the connection is clean for the next transaction.
func TestPlainBatchRefusesRefundsStoredFirst(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	ctx := context.Background()
	store, _ := countedStore(t, d, pgx.QueryExecModeCacheStatement) // one connection
	refund := db.BatchEvent{Deliveries: 1, EventParams: db.EventParams{Provider: "stripe", EventID: "evt_refund", Type: "refund", Payload: []byte(`{}`),
		Reversal: "partial refund", Amount: &db.Amount{Minor: 500, Currency: "EUR"}, RefundOf: "pi_r", RefundID: "re_1"}}
	_, err := db.InsertEvents(ctx, d.Pool, []db.BatchEvent{refund})
	require.NoError(t, err)
	paid := func(id, payment string) db.BatchEvent {
		return db.BatchEvent{Deliveries: 1, EventParams: db.EventParams{Provider: "stripe", EventID: id, Type: "t", PaymentID: payment, Payload: []byte(`{}`)}}
	}
	for range 2 { // the second on a connection the first's failure left
		err = store.InPipelinedTx(ctx, func(tx pgx.Tx) error {
			db.CommitWithNext(tx)
			_, _, err := db.RecordPlainBatch(ctx, tx, []db.BatchEvent{paid("evt_other", "pi_other"), paid("evt_paid", "pi_r")}, []string{"test", "test"}, db.Birth{Reason: "test"})
			return err
		})
		require.ErrorIs(t, err, db.ErrNotPlain)
		require.Zero(t, d.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id IN ('evt_other', 'evt_paid')`), "nothing of the batch committed")
		require.Zero(t, d.Count(t, `SELECT count(*) FROM fulfilment`))
	}
}
