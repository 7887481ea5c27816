package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
)

// TestPurchasesAwaitingTheirItems: a purchase recorded awaiting its items
// pays for no action, is reported once for its fetch, keeps its events'
// bodies from the prune, and is routed at most once; a payment fulfilled
// before actions existed awaits nothing.
func TestPurchasesAwaitingTheirItems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := dbtest.NewDB(t)
	pay := db.Payment{Provider: "stripe", PaymentID: "pi_wait"}
	old := db.Payment{Provider: "stripe", PaymentID: "pi_old"}

	oldPK, _, err := insertEvent(ctx, d.Pool, db.EventParams{Provider: "stripe", EventID: "evt_old", Type: "t", PaymentID: old.PaymentID, Payload: []byte(`{}`)})
	require.NoError(t, err)
	_, _, err = db.InsertFulfilment(ctx, d.Pool, oldPK, "test", "payment event received")
	require.NoError(t, err)
	pk, _, err := insertEvent(ctx, d.Pool, db.EventParams{Provider: "stripe", EventID: "evt_wait", Type: "t", PaymentID: pay.PaymentID, Payload: []byte(`{"x":1}`)})
	require.NoError(t, err)

	record := []db.PurchaseRecord{
		{Payment: pay, Actions: []string{"licence"}, Routes: "r", Detail: []byte(`{"id":"pi_wait"}`), AwaitingItems: "cs_1"},
		{Payment: old, Routes: "r", AwaitingItems: "cs_0"},
	}
	awaiting, err := db.RecordPurchases(ctx, d.Pool, record)
	require.NoError(t, err)
	require.Equal(t, []db.Payment{pay}, awaiting, "a payment with rows keeps their actions and awaits nothing")
	require.Equal(t, 1, d.Count(t, `SELECT count(*) FROM purchase WHERE payment_id = 'pi_old' AND actions = '{fulfil}' AND awaiting_items IS NULL`))
	again, err := db.RecordPurchases(ctx, d.Pool, record)
	require.NoError(t, err)
	require.Empty(t, again, "a purchase recorded before is not reported again")
	actions, ok, err := db.PurchaseActions(ctx, d.Pool, pay)
	require.NoError(t, err)
	require.True(t, ok)
	require.Empty(t, actions, "awaiting, it pays for nothing")
	created, err := db.InsertFulfilments(ctx, d.Pool, []db.BatchFulfilment{{EventPK: pk, Actor: "test"}}, db.Birth{Reason: "test"})
	require.NoError(t, err)
	require.Empty(t, created)
	_, err = d.Pool.Exec(ctx, `UPDATE purchase SET actions = '{licence}' WHERE payment_id = 'pi_wait'`)
	require.ErrorContains(t, err, "purchase_awaiting_routes_nothing")

	// Past the retention, the awaiting purchase's body stays.
	_, err = d.Pool.Exec(ctx, `UPDATE webhook_event SET first_seen_at = now() - interval '100 days'`)
	require.NoError(t, err)
	_, _, err = db.New(d.Pool).PruneEventBodies(ctx, time.Now().Add(-90*24*time.Hour), 100)
	require.NoError(t, err)
	require.Equal(t, 0, d.Count(t, `SELECT count(*) FROM webhook_event WHERE id = $1 AND pruned_at IS NOT NULL`, pk))

	require.NoError(t, db.NoteRoutingFailure(ctx, d.Pool, pay, "stripe answered 500: down"))
	list, total, err := db.PurchasesAwaiting(ctx, d.Pool, 10)
	require.NoError(t, err)
	require.Equal(t, 1, total)
	require.Equal(t, "cs_1", list[0].Ref)
	require.Equal(t, 1, list[0].Attempts)
	require.Equal(t, "stripe answered 500: down", list[0].Error)

	tx, err := d.Pool.Begin(ctx)
	require.NoError(t, err)
	_, ok, err = db.LockAwaiting(ctx, tx, pay)
	require.NoError(t, err)
	require.True(t, ok)
	eventPK, err := db.RoutePurchase(ctx, tx, pay, []string{"licence"}, "r2", []byte(`{"id":"pi_wait","items":[{"product":"p"}]}`))
	require.NoError(t, err)
	require.Equal(t, pk, eventPK, "the purchase's first paid event")
	require.NoError(t, tx.Commit(ctx))
	_, err = db.RoutePurchase(ctx, d.Pool, pay, []string{"licence", "other"}, "r3", nil)
	require.ErrorIs(t, err, db.ErrNotFound, "routed once")
	_, ok, err = db.LockAwaiting(ctx, d.Pool, pay)
	require.NoError(t, err)
	require.False(t, ok)
	actions, _, err = db.PurchaseActions(ctx, d.Pool, pay)
	require.NoError(t, err)
	require.Equal(t, []string{"licence"}, actions)
	_, total, err = db.PurchasesAwaiting(ctx, d.Pool, 10)
	require.NoError(t, err)
	require.Zero(t, total)
}

// TestEventsRecordTheirPurchases: a batch's new paying events record their
// purchases in the statement that stores them, the first of a payment's
// winning; a known event's delivery records none (the routes decided when
// it was first stored, and a payment recorded before actions existed
// stays as it was), and a purchase awaiting its items is reported on the
// event that recorded it.
func TestEventsRecordTheirPurchases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := dbtest.NewDB(t)
	ev := func(id, payment string, p *db.PurchaseRecord) db.BatchEvent {
		return db.BatchEvent{Deliveries: 1, Purchase: p, EventParams: db.EventParams{Provider: "stripe", EventID: id, Type: "t", PaymentID: payment, Payload: []byte(`{}`)}}
	}
	buy := func(payment, awaits string, actions ...string) *db.PurchaseRecord {
		return &db.PurchaseRecord{Payment: db.Payment{Provider: "stripe", PaymentID: payment}, Actions: actions, Routes: "r", AwaitingItems: awaits}
	}
	// Stored before, with no purchase: as a payment before actions.
	_, err := db.InsertEvents(ctx, d.Pool, []db.BatchEvent{ev("evt_known", "pi_known", nil)})
	require.NoError(t, err)

	got, err := db.InsertEvents(ctx, d.Pool, []db.BatchEvent{
		ev("evt_a1", "pi_a", buy("pi_a", "", "licence")),
		ev("evt_a2", "pi_a", buy("pi_a", "", "seat")),
		ev("evt_known", "pi_known", buy("pi_known", "", "licence")),
		ev("evt_w", "pi_w", buy("pi_w", "cs_w")),
	})
	require.NoError(t, err)
	require.True(t, got[0].Inserted && got[1].Inserted && !got[2].Inserted && got[3].Inserted)
	require.Equal(t, []bool{false, false, false, true}, []bool{got[0].Awaiting, got[1].Awaiting, got[2].Awaiting, got[3].Awaiting})
	actions, ok, err := db.PurchaseActions(ctx, d.Pool, db.Payment{Provider: "stripe", PaymentID: "pi_a"})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []string{"licence"}, actions, "the payment's first event decides")
	_, ok, err = db.PurchaseActions(ctx, d.Pool, db.Payment{Provider: "stripe", PaymentID: "pi_known"})
	require.NoError(t, err)
	require.False(t, ok, "a known event's delivery records no purchase")
	require.Equal(t, 1, d.Count(t, `SELECT count(*) FROM purchase WHERE payment_id = 'pi_w' AND awaiting_items = 'cs_w' AND actions = '{}'`))
}
