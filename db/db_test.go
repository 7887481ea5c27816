package db_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
	"github.com/guardian-pay/guardian/goose"
)

type testBundle struct {
	ctx context.Context
	tx  pgx.Tx
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	return &testBundle{ctx: context.Background(), tx: dbtest.Tx(t)}
}

// insertEvent stores one event through InsertEvents, the path intake
// takes for every delivery.
func insertEvent(ctx context.Context, q db.DBTX, p db.EventParams) (id int64, inserted bool, err error) {
	stored, err := db.InsertEvents(ctx, q, []db.BatchEvent{{EventParams: p, Deliveries: 1}})
	if err != nil {
		return 0, false, err
	}
	return stored[0].ID, stored[0].Inserted, nil
}

// newFulfilment stores an event and its pending fulfilment.
// recordPurchases records purchases none of which awaits its items.
func recordPurchases(ctx context.Context, q db.DBTX, purchases []db.PurchaseRecord) error {
	_, err := db.RecordPurchases(ctx, q, purchases)
	return err
}

func newFulfilment(t *testing.T, ctx context.Context, q db.DBTX, eventID, paymentID string) string {
	t.Helper()
	pk, inserted, err := insertEvent(ctx, q, db.EventParams{Provider: "stripe", EventID: eventID, Type: "payment_intent.succeeded", PaymentID: paymentID, Payload: []byte(`{"id":"` + eventID + `"}`)})
	require.NoError(t, err)
	require.True(t, inserted)
	id, inserted, err := db.InsertFulfilment(ctx, q, pk, "test", "payment event received")
	require.NoError(t, err)
	require.True(t, inserted)
	return id
}

func TestInsertEvent(t *testing.T) {
	t.Parallel()

	t.Run("DuplicateDeliveryIsCountedNotStored", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := db.EventParams{Provider: "stripe", EventID: "evt_1", Type: "charge.updated", Payload: []byte(`{"a":1}`)}
		id1, inserted, err := insertEvent(b.ctx, b.tx, p)
		require.NoError(t, err)
		require.True(t, inserted)
		id2, inserted, err := insertEvent(b.ctx, b.tx, p)
		require.NoError(t, err)
		require.False(t, inserted)
		require.Equal(t, id1, id2)

		e, err := db.GetEvent(b.ctx, b.tx, "stripe", "evt_1")
		require.NoError(t, err)
		require.Equal(t, 2, e.Deliveries)
		var n int
		require.NoError(t, b.tx.QueryRow(b.ctx, `SELECT count(*) FROM webhook_event`).Scan(&n))
		require.Equal(t, 1, n)
	})

	t.Run("SameEventIDOtherProviderIsAnotherEvent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, prov := range []string{"stripe", "standard"} {
			_, inserted, err := insertEvent(b.ctx, b.tx, db.EventParams{Provider: prov, EventID: "evt_1", Type: "x", Payload: []byte(`{}`)})
			require.NoError(t, err)
			require.True(t, inserted)
		}
	})

	t.Run("UnknownEventIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := db.GetEvent(b.ctx, b.tx, "stripe", "evt_nope")
		require.ErrorIs(t, err, db.ErrNotFound)
	})
}

// failAt claims a pending fulfilment and records the connector's refusal.
func failAt(t *testing.T, b *testBundle, id string) {
	t.Helper()
	_, err := db.ClaimForDispatch(b.ctx, b.tx, db.ClaimParams{ID: id, Actor: "t", Timeout: 30 * time.Second})
	require.NoError(t, err)
	_, err = db.Transit(b.ctx, b.tx, db.TransitionParams{ID: id, From: "dispatching", To: "failed", Attempt: 1, Actor: "t", Reason: "r"})
	require.NoError(t, err)
}

func TestInsertFulfilment(t *testing.T) {
	t.Parallel()

	t.Run("OnePerPaymentAcrossEvents", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		newFulfilment(t, b.ctx, b.tx, "evt_a", "pi_1")
		pk, _, err := insertEvent(b.ctx, b.tx, db.EventParams{Provider: "stripe", EventID: "evt_b", Type: "checkout.session.completed", PaymentID: "pi_1", Payload: []byte(`{}`)})
		require.NoError(t, err)
		_, inserted, err := db.InsertFulfilment(b.ctx, b.tx, pk, "test", "payment event received")
		require.NoError(t, err)
		require.False(t, inserted)

		fs, err := db.FulfilmentsByPayment(b.ctx, b.tx, "stripe", "pi_1")
		require.NoError(t, err)
		require.Len(t, fs, 1)
	})

	t.Run("FailedFreesThePayment", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := newFulfilment(t, b.ctx, b.tx, "evt_a", "pi_1")
		failAt(t, b, id)
		newFulfilment(t, b.ctx, b.tx, "evt_b", "pi_1")
	})

	t.Run("OnePerEventTillFailed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := newFulfilment(t, b.ctx, b.tx, "evt_a", "pi_1")
		f, err := db.GetFulfilment(b.ctx, b.tx, id)
		require.NoError(t, err)
		_, inserted, err := db.InsertFulfilment(b.ctx, b.tx, f.EventPK, "test", "again")
		require.NoError(t, err)
		require.False(t, inserted, "an event has one live fulfilment")
		failAt(t, b, id)
		again, inserted, err := db.InsertFulfilment(b.ctx, b.tx, f.EventPK, "test", "retry")
		require.NoError(t, err)
		require.True(t, inserted, "a failed fulfilment frees its event")
		g, err := db.GetFulfilment(b.ctx, b.tx, again)
		require.NoError(t, err)
		require.Equal(t, "pi_1", g.PaymentID, "the payment comes from the event")
		require.Equal(t, "stripe", g.Provider)
	})

	t.Run("NotForAnEventThatFulfilsNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		pk, _, err := insertEvent(b.ctx, b.tx, db.EventParams{Provider: "stripe", EventID: "evt_x", Type: "customer.created", Payload: []byte(`{}`)})
		require.NoError(t, err)
		_, inserted, err := db.InsertFulfilment(b.ctx, b.tx, pk, "test", "no payment")
		require.NoError(t, err)
		require.False(t, inserted)
	})

	t.Run("CreationIsLogged", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := newFulfilment(t, b.ctx, b.tx, "evt_a", "pi_1")
		ts, err := db.Transitions(b.ctx, b.tx, id)
		require.NoError(t, err)
		require.Len(t, ts, 1)
		require.Equal(t, state.State(""), ts[0].From)
		require.Equal(t, state.State("pending"), ts[0].To)
	})
}

func TestTransit(t *testing.T) {
	t.Parallel()

	t.Run("ClaimTakesTheNextAttempt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := newFulfilment(t, b.ctx, b.tx, "evt_a", "pi_1")
		in, err := db.ClaimForDispatch(b.ctx, b.tx, db.ClaimParams{ID: id, Actor: "worker", Evidence: map[string]int{"river_attempt": 1}, Timeout: 30 * time.Second})
		f := in.Fulfilment
		require.NoError(t, err)
		require.Equal(t, 1, f.Attempt)
		require.NotNil(t, f.DispatchedAt)
	})

	t.Run("WrongStateIsConflict", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := newFulfilment(t, b.ctx, b.tx, "evt_a", "pi_1")
		_, err := db.Transit(b.ctx, b.tx, db.TransitionParams{ID: id, From: "dispatching", To: "fulfilled", Actor: "w", Reason: "r"})
		require.ErrorIs(t, err, db.ErrConflict)
		ts, err := db.Transitions(b.ctx, b.tx, id)
		require.NoError(t, err)
		require.Len(t, ts, 1, "a conflicting move logs nothing")
	})

	t.Run("StaleAttemptIsConflict", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := newFulfilment(t, b.ctx, b.tx, "evt_a", "pi_1")
		_, err := db.ClaimForDispatch(b.ctx, b.tx, db.ClaimParams{ID: id, Actor: "w", Timeout: 30 * time.Second})
		require.NoError(t, err)
		_, err = db.Transit(b.ctx, b.tx, db.TransitionParams{ID: id, From: "dispatching", To: "fulfilled", Attempt: 2, Actor: "w", Reason: "r"})
		require.ErrorIs(t, err, db.ErrConflict)
		f, err := db.Transit(b.ctx, b.tx, db.TransitionParams{ID: id, From: "dispatching", To: "fulfilled", Attempt: 1, Actor: "w", Reason: "r", Evidence: map[string]int{"status": 200}})
		require.NoError(t, err)
		require.Equal(t, state.State("fulfilled"), f.State)
		ts, err := db.Transitions(b.ctx, b.tx, id)
		require.NoError(t, err)
		require.Len(t, ts, 3)
		require.JSONEq(t, `{"status":200}`, string(ts[2].Evidence))
	})

	t.Run("TransitionLogIsAppendOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := newFulfilment(t, b.ctx, b.tx, "evt_a", "pi_1")
		_, err := b.tx.Exec(b.ctx, `SAVEPOINT s1`)
		require.NoError(t, err)
		_, err = b.tx.Exec(b.ctx, `UPDATE fulfilment_transition SET reason = 'rewritten' WHERE fulfilment_id = $1`, id)
		require.ErrorContains(t, err, "append-only")
		_, err = b.tx.Exec(b.ctx, `ROLLBACK TO SAVEPOINT s1`)
		require.NoError(t, err)
		_, err = b.tx.Exec(b.ctx, `DELETE FROM fulfilment_transition WHERE fulfilment_id = $1`, id)
		require.ErrorContains(t, err, "append-only")
	})
}

// TestDatabaseGuardMatchesStateMachine tries every pair of states directly in
// SQL and checks the trigger allows exactly app/state's transitions.
func TestDatabaseGuardMatchesStateMachine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := newFulfilment(t, b.ctx, b.tx, "evt_a", "pi_1")

	for _, from := range state.All {
		for _, to := range state.All {
			if from == to {
				continue
			}
			_, err := b.tx.Exec(b.ctx, `SAVEPOINT pair`)
			require.NoError(t, err)
			// Place the row in `from` with the guard off, then try the move with it on.
			_, err = b.tx.Exec(b.ctx, `SET LOCAL session_replication_role = replica`)
			require.NoError(t, err)
			_, err = b.tx.Exec(b.ctx, `UPDATE fulfilment_move SET state = $2 WHERE id = $1`, id, string(from))
			require.NoError(t, err)
			_, err = b.tx.Exec(b.ctx, `SET LOCAL session_replication_role = origin`)
			require.NoError(t, err)
			_, err = b.tx.Exec(b.ctx, `UPDATE fulfilment SET state = $2, attempt = attempt + CASE WHEN $2 = 'dispatching' THEN 1 ELSE 0 END WHERE id = $1`, id, string(to))
			var pgErr *pgconn.PgError
			dbAllowed := err == nil
			if err != nil {
				require.ErrorAs(t, err, &pgErr)
				require.Equal(t, "23514", pgErr.Code, "%s -> %s: %v", from, to, err)
			}
			require.Equal(t, state.Allowed(from, to), dbAllowed, "%s -> %s", from, to)
			_, err = b.tx.Exec(b.ctx, `ROLLBACK TO SAVEPOINT pair`)
			require.NoError(t, err)
		}
	}

	_, err := b.tx.Exec(b.ctx, `SAVEPOINT bad`)
	require.NoError(t, err)
	_, err = b.tx.Exec(b.ctx, `INSERT INTO fulfilment (event_pk, provider, payment_id, state, idempotency_key) SELECT event_pk, provider, 'pi_2', 'shipped', 'k2' FROM fulfilment WHERE id = $1`, id)
	require.ErrorContains(t, err, "fulfilment_state_check")
}

func TestParking(t *testing.T) {
	t.Parallel()

	t.Run("ResetsTheLookupSchedule", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := newFulfilment(t, b.ctx, b.tx, "evt_a", "pi_1")
		_, err := db.ClaimForDispatch(b.ctx, b.tx, db.ClaimParams{ID: id, Actor: "w", Timeout: 30 * time.Second})
		require.NoError(t, err)
		_, err = db.Transit(b.ctx, b.tx, db.TransitionParams{ID: id, From: "dispatching", To: "needs_reconciliation", Attempt: 1, Actor: "w", Reason: "unknown"})
		require.NoError(t, err)
		require.NoError(t, db.RecordCheck(b.ctx, b.tx, id, 1, "r", "not_done", map[string]int{}, time.Hour))
		f, err := db.GetFulfilment(b.ctx, b.tx, id)
		require.NoError(t, err)
		require.Equal(t, 1, f.Checks)
		require.NotNil(t, f.NextCheckAt)

		// Dispatched again and parked again: the new parking starts afresh.
		_, err = db.Transit(b.ctx, b.tx, db.TransitionParams{ID: id, From: "needs_reconciliation", To: "pending", Attempt: 1, Actor: "r", Reason: "not done"})
		require.NoError(t, err)
		_, err = db.ClaimForDispatch(b.ctx, b.tx, db.ClaimParams{ID: id, Actor: "w", Timeout: 30 * time.Second})
		require.NoError(t, err)
		_, err = db.Transit(b.ctx, b.tx, db.TransitionParams{ID: id, From: "dispatching", To: "needs_reconciliation", Attempt: 2, Actor: "w", Reason: "unknown"})
		require.NoError(t, err)
		f, err = db.GetFulfilment(b.ctx, b.tx, id)
		require.NoError(t, err)
		require.Zero(t, f.Checks)
		require.Nil(t, f.NextCheckAt)
	})

	t.Run("DispatchingOnlyThroughAClaim", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := newFulfilment(t, b.ctx, b.tx, "evt_a", "pi_1")
		_, err := db.Transit(b.ctx, b.tx, db.TransitionParams{ID: id, From: "pending", To: "dispatching", Actor: "w", Reason: "r"})
		require.ErrorContains(t, err, "dispatching must take attempt 1")
	})
}

func TestSweepStale(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := newFulfilment(t, b.ctx, b.tx, "evt_old", "pi_old")
	fresh := newFulfilment(t, b.ctx, b.tx, "evt_new", "pi_new")
	for _, id := range []string{old, fresh} {
		_, err := db.ClaimForDispatch(b.ctx, b.tx, db.ClaimParams{ID: id, Actor: "w", Timeout: 30 * time.Second})
		require.NoError(t, err)
	}
	_, err := b.tx.Exec(b.ctx, `SET LOCAL session_replication_role = replica`)
	require.NoError(t, err)
	_, err = b.tx.Exec(b.ctx, `UPDATE fulfilment_move SET dispatched_at = now() - interval '10 minutes', deadline = now() - interval '9 minutes' WHERE id = $1`, old)
	require.NoError(t, err)
	_, err = b.tx.Exec(b.ctx, `SET LOCAL session_replication_role = origin`)
	require.NoError(t, err)

	moved, err := db.SweepStale(b.ctx, b.tx, 5*time.Minute, 15*time.Second, "sweeper", "lease expired", nil)
	require.NoError(t, err)
	require.Len(t, moved, 1)
	require.Equal(t, old, moved[0].ID)
	require.Equal(t, state.State("needs_reconciliation"), moved[0].State)

	f, err := db.GetFulfilment(b.ctx, b.tx, fresh)
	require.NoError(t, err)
	require.Equal(t, state.State("dispatching"), f.State)
}

// A claim made by a process with a longer connector timeout is judged by
// its own deadline: a reader whose lease has passed (an older process in a
// rollout, configured with a shorter timeout) must not park it while its
// call may still be running.
func TestSweepReadsTheClaimsOwnDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	slow := newFulfilment(t, b.ctx, b.tx, "evt_slow", "pi_slow")
	_, err := db.ClaimForDispatch(b.ctx, b.tx, db.ClaimParams{ID: slow, Actor: "new process", Timeout: 20 * time.Minute})
	require.NoError(t, err)
	_, err = b.tx.Exec(b.ctx, `SET LOCAL session_replication_role = replica`)
	require.NoError(t, err)
	_, err = b.tx.Exec(b.ctx, `UPDATE fulfilment_move SET dispatched_at = now() - interval '10 minutes', deadline = now() + interval '10 minutes' WHERE id = $1`, slow)
	require.NoError(t, err)
	_, err = b.tx.Exec(b.ctx, `SET LOCAL session_replication_role = origin`)
	require.NoError(t, err)

	moved, err := db.SweepStale(b.ctx, b.tx, 5*time.Minute, 15*time.Second, "old process", "lease expired", nil)
	require.NoError(t, err)
	require.Empty(t, moved, "the claim's own deadline has not passed")
	claim, err := db.Claim(b.ctx, b.tx, slow, 15*time.Second, 30*time.Second)
	require.NoError(t, err)
	require.True(t, claim.Live, "a reader with a 30 s window still sees the 20 min claim live")

	later := time.Now().Add(11 * time.Minute)
	moved, err = db.SweepStale(b.ctx, b.tx, 5*time.Minute, 15*time.Second, "old process", "lease expired", &later)
	require.NoError(t, err)
	require.Len(t, moved, 1, "past its deadline and margin, the claim is parked")
}

// TestKeysDeriveFromThePayment: two databases that know nothing of each
// other (a restored one and the original, two deployments) name the same
// key for the same payment; a payment whose key was declined goes out
// under its next key, and only then.
func TestKeysDeriveFromThePayment(t *testing.T) {
	t.Parallel()
	a, b := setup(t), setup(t)
	idA := newFulfilment(t, a.ctx, a.tx, "evt_a", "pi_same")
	idB := newFulfilment(t, b.ctx, b.tx, "evt_b", "pi_same") // another event of the purchase
	fa, err := db.GetFulfilment(a.ctx, a.tx, idA)
	require.NoError(t, err)
	fb, err := db.GetFulfilment(b.ctx, b.tx, idB)
	require.NoError(t, err)
	require.NotEqual(t, fa.ID, fb.ID)
	require.Equal(t, fa.Key, fb.Key, "one key per payment, whichever database holds the row")
	want, err := db.IdempotencyKey(a.ctx, a.tx, "stripe", "pi_same", 0)
	require.NoError(t, err)
	require.Equal(t, want, fa.Key)
	require.Regexp(t, `^gk1_[0-9a-f]{40}$`, fa.Key)

	other := newFulfilment(t, a.ctx, a.tx, "evt_c", "pi_other")
	fo, err := db.GetFulfilment(a.ctx, a.tx, other)
	require.NoError(t, err)
	require.NotEqual(t, fa.Key, fo.Key)

	// The receiver declines the key: the payment's next fulfilment counts
	// one decline and takes the next key.
	_, err = db.ClaimForDispatch(a.ctx, a.tx, db.ClaimParams{ID: idA, Actor: "w", Timeout: 30 * time.Second})
	require.NoError(t, err)
	_, err = db.Transit(a.ctx, a.tx, db.TransitionParams{ID: idA, From: "dispatching", To: "failed", Attempt: 1, Actor: "w", Reason: "declined"})
	require.NoError(t, err)
	pk, _, err := insertEvent(a.ctx, a.tx, db.EventParams{Provider: "stripe", EventID: "evt_d", Type: "payment_intent.succeeded", PaymentID: "pi_same", Payload: []byte(`{}`)})
	require.NoError(t, err)
	next, inserted, err := db.InsertFulfilment(a.ctx, a.tx, pk, "test", "retry")
	require.NoError(t, err)
	require.True(t, inserted)
	fn, err := db.GetFulfilment(a.ctx, a.tx, next)
	require.NoError(t, err)
	want, err = db.IdempotencyKey(a.ctx, a.tx, "stripe", "pi_same", 1)
	require.NoError(t, err)
	require.Equal(t, want, fn.Key)
	require.NotEqual(t, fa.Key, fn.Key)

	// The key is part of the row's identity.
	_, err = a.tx.Exec(a.ctx, `UPDATE fulfilment SET idempotency_key = 'k' WHERE id = $1`, next)
	require.ErrorContains(t, err, "immutable")
}

// TestInTxRunsAgainAfterADeadlock: two transactions that lock two rows in
// opposite orders deadlock; Postgres aborts one (40P01), InTx runs it
// again, and both callers see success with both writes made.
func TestInTxRunsAgainAfterADeadlock(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	store := db.New(d.Pool)
	t.Run("InTx", func(t *testing.T) { runsAgainAfterADeadlock(t, d, store.InTx) })
	t.Run("InPipelinedTx", func(t *testing.T) { runsAgainAfterADeadlock(t, d, store.InPipelinedTx) })
	require.True(t, db.Retryable(&pgconn.PgError{Code: "40P01"}))
	require.True(t, db.Retryable(fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "40001"})))
	require.False(t, db.Retryable(&pgconn.PgError{Code: "23505"}))
}

func runsAgainAfterADeadlock(t *testing.T, d *dbtest.DB, inTx func(context.Context, func(pgx.Tx) error) error) {
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, `DROP TABLE IF EXISTS pair; CREATE TABLE pair (id int PRIMARY KEY, n int NOT NULL); INSERT INTO pair VALUES (1, 0), (2, 0)`)
	require.NoError(t, err)
	var runs atomic.Int32
	firstLocks := make(chan struct{}, 2)
	lockInOrder := func(a, b int) error {
		return inTx(ctx, func(tx pgx.Tx) error {
			run := runs.Add(1)
			if _, err := tx.Exec(ctx, `UPDATE pair SET n = n + 1 WHERE id = $1`, a); err != nil {
				return err
			}
			if run <= 2 { // the first run of each: hold the first lock until both have theirs
				firstLocks <- struct{}{}
				for len(firstLocks) < 2 {
					time.Sleep(time.Millisecond)
				}
			}
			_, err := tx.Exec(ctx, `UPDATE pair SET n = n + 1 WHERE id = $1`, b)
			return err
		})
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Go(func() { errs[0] = lockInOrder(1, 2) })
	wg.Go(func() { errs[1] = lockInOrder(2, 1) })
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.GreaterOrEqual(t, runs.Load(), int32(3), "a transaction lost the deadlock and ran again")
	require.Equal(t, 4, d.Count(t, `SELECT sum(n)::int FROM pair`), "both transactions' writes, once each")
}

func TestMigrations(t *testing.T) {
	t.Parallel()

	t.Run("RiverSchemaIsCurrent", func(t *testing.T) {
		t.Parallel()
		d := dbtest.NewDB(t)
		migrator, err := rivermigrate.New(riverpgxv5.New(d.Pool), nil)
		require.NoError(t, err)
		res, err := migrator.Validate(context.Background(), nil)
		require.NoError(t, err)
		require.True(t, res.OK, "river migrations: %v", res.Messages)
	})

	// Fulfilments made before keys were derived keep the key they were
	// sent under, their id: a receiver that saw it must see it again.
	t.Run("UpgradeKeepsEachRowsKey", func(t *testing.T) {
		t.Parallel()
		d, m := migrated(t)
		ctx := context.Background()
		for {
			res, err := m.Down(ctx)
			require.NoError(t, err)
			if res.Source.Version == 19 {
				break // 00019 rolled back: the schema before keys were derived
			}
		}
		var id string
		require.NoError(t, d.Pool.QueryRow(ctx, `WITH e AS (
			INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body) VALUES ('stripe', 'evt_old', 't', 'pi_old', '{}') RETURNING id)
			INSERT INTO fulfilment (event_pk, provider, payment_id) SELECT id, 'stripe', 'pi_old' FROM e RETURNING id`).Scan(&id))
		_, err := m.Up(ctx)
		require.NoError(t, err)
		f, err := db.GetFulfilment(ctx, d.Pool, id)
		require.NoError(t, err)
		require.Equal(t, id, f.Key)
		require.Nil(t, f.Deadline)
	})

	// A build of the index of reversals interrupted by a killed process
	// leaves it invalid: the next start builds it again, and drops the
	// old one only then (migration 00049); a rollback likewise.
	t.Run("AnInterruptedIndexBuildIsBuiltAgain", func(t *testing.T) {
		t.Parallel()
		d, m := migrated(t)
		ctx := context.Background()
		// interrupted leaves what an interrupted CREATE INDEX CONCURRENTLY
		// leaves under name: the index, marked invalid, whatever it came to
		// hold. migrate then runs, and built says what is left: the index
		// under want, valid, and none under gone.
		interrupted := func(name string, migrate func(context.Context) error) {
			t.Helper()
			_, err := d.Pool.Exec(ctx, `CREATE INDEX `+name+` ON webhook_event (provider);
				UPDATE pg_index SET indisvalid = false WHERE indexrelid = '`+name+`'::regclass`)
			require.NoError(t, err)
			require.NoError(t, migrate(ctx))
		}
		built := func(want, definition, gone string) {
			t.Helper()
			var valid bool
			var def string
			require.NoError(t, d.Pool.QueryRow(ctx, `SELECT indisvalid, pg_get_indexdef(indexrelid) FROM pg_index WHERE indexrelid = $1::regclass`, want).Scan(&valid, &def))
			require.True(t, valid, "%s left invalid", want)
			require.Contains(t, def, definition)
			var left *string
			require.NoError(t, d.Pool.QueryRow(ctx, `SELECT to_regclass($1)::text`, gone).Scan(&left))
			require.Nil(t, left, "%s kept beside %s", gone, want)
		}
		// down rolls back to before 00049, the later migrations first.
		down := func(ctx context.Context) error {
			for {
				res, err := m.Down(ctx)
				if err != nil || res.Source.Version == 49 {
					return err
				}
				if res.Source.Version < 49 {
					return fmt.Errorf("rolled back %d, want 49", res.Source.Version)
				}
			}
		}
		up := func(ctx context.Context) error { _, err := m.Up(ctx); return err }
		require.NoError(t, down(ctx))
		interrupted("webhook_event_reversals", up)
		built("webhook_event_reversals", "INCLUDE (id, event_id, revokes, suspends) WHERE (reverses IS NOT NULL)", "webhook_event_reverses")
		// The rollback, interrupted the same way, builds the old index
		// again before it drops the new.
		interrupted("webhook_event_reverses", down)
		built("webhook_event_reverses", "(provider, reverses) WHERE (reverses IS NOT NULL)", "webhook_event_reversals")
	})

	// Rows made before the moving row carried its payment and its
	// action's name get them from their identity (migration 00051), each
	// its own.
	t.Run("TheMoveTakesItsPaymentAndActionsName", func(t *testing.T) {
		t.Parallel()
		d, m := migrated(t)
		ctx := context.Background()
		for {
			res, err := m.Down(ctx)
			require.NoError(t, err)
			if res.Source.Version == 51 {
				break
			}
		}
		_, err := d.Pool.Exec(ctx, `WITH e AS (
			INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body) VALUES ('stripe', 'evt_old', 't', 'pi_old', '{}') RETURNING id)
			INSERT INTO fulfilment (event_pk, provider, payment_id, idempotency_key, action_name, state)
			SELECT id, 'stripe', 'pi_old', 'k_' || a, a, s FROM e, (VALUES ('fulfil', 'fulfilled'), ('licence', 'pending'), ('seats', 'failed')) v(a, s)`)
		require.NoError(t, err)
		_, err = m.Up(ctx)
		require.NoError(t, err)
		rows, err := d.Pool.Query(ctx, `SELECT m.action_name || ' ' || m.state FROM fulfilment_move m JOIN fulfilment_identity i USING (id)
			WHERE (m.provider, m.payment_id, m.action_name) = (i.provider, i.payment_id, i.action_name) AND m.payment_id = 'pi_old' ORDER BY 1`)
		require.NoError(t, err)
		named, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Equal(t, []string{"fulfil fulfilled", "licence pending", "seats failed"}, named)
		var notNull int
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_attribute WHERE attrelid = 'fulfilment_move'::regclass
			AND attname IN ('provider', 'payment_id', 'action_name') AND attnotnull AND NOT atthasdef`).Scan(&notNull))
		require.Equal(t, 3, notNull, "the copies are required, with no default to fall back on")
	})

	t.Run("DownAndUpAgain", func(t *testing.T) {
		t.Parallel()
		d, m := migrated(t)
		ctx := context.Background()
		current, err := m.Current(ctx)
		require.NoError(t, err)
		require.True(t, current)
		for {
			_, err = m.Down(ctx)
			if errors.Is(err, goose.ErrNoNextVersion) {
				break
			}
			require.NoError(t, err)
		}
		var n int
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename IN ('fulfilment_identity', 'river_job')`).Scan(&n))
		require.Zero(t, n)
		current, err = m.Current(ctx)
		require.NoError(t, err)
		require.False(t, current)
		_, err = m.Up(ctx)
		require.NoError(t, err)
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename IN ('fulfilment_identity', 'river_job')`).Scan(&n))
		require.Equal(t, 2, n)
	})
}

// migrated returns a fresh database with every migration applied and the
// migrator that applied them, closed when the test ends.
func migrated(t *testing.T) (*dbtest.DB, *goose.Migrator) {
	t.Helper()
	d := dbtest.NewDB(t)
	m, err := goose.NewMigrator(d.Pool)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return d, m
}
