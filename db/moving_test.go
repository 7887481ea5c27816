package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
)

// TestMovesLeaveTheIdentity: a fulfilment's moves update its moving row
// alone (migration 00050), so none writes an index of the identity, the
// one keyed by the payment among them; the identity is updated once, when
// its row fails, which frees the action for the next row (invariant 1)
// and nothing else can do.
func TestMovesLeaveTheIdentity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	done := newFulfilment(t, b.ctx, b.tx, "evt_done", "pi_done")
	parked := newFulfilment(t, b.ctx, b.tx, "evt_parked", "pi_parked")
	declined := newFulfilment(t, b.ctx, b.tx, "evt_declined", "pi_declined")
	count := func(query string, args ...any) int {
		t.Helper()
		var n int
		require.NoError(t, b.tx.QueryRow(b.ctx, query, args...).Scan(&n))
		return n
	}
	updates := func(table string) int {
		t.Helper()
		return count(`SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = $1`, table)
	}
	identity, move := updates("fulfilment_identity"), updates("fulfilment_move")

	claims := []db.ClaimParams{}
	for _, id := range []string{done, parked, declined} {
		claims = append(claims, db.ClaimParams{ID: id, Actor: "w", Timeout: 30 * time.Second})
	}
	claimed, err := db.ClaimManyForDispatch(b.ctx, b.tx, claims)
	require.NoError(t, err)
	require.Len(t, claimed, 3)
	moved, err := db.TransitMany(b.ctx, b.tx, []db.TransitionParams{
		{ID: done, From: state.Dispatching, To: state.Fulfilled, Attempt: 1, Actor: "w", Reason: "done"},
		{ID: parked, From: state.Dispatching, To: state.NeedsReconciliation, Attempt: 1, Actor: "w", Reason: "unknown"},
		{ID: declined, From: state.Dispatching, To: state.Failed, Attempt: 1, Actor: "w", Reason: "declined"},
	})
	require.NoError(t, err)
	require.Len(t, moved, 3)
	require.Equal(t, state.Failed, moved[declined].State, "the move's row, read back with its identity")
	require.Equal(t, "pi_declined", moved[declined].PaymentID)

	require.Equal(t, 6, updates("fulfilment_move")-move, "two moves of each row, on the moving row")
	require.Equal(t, 1, updates("fulfilment_identity")-identity, "the identity updated only as its row failed")
	require.Equal(t, 1, count(`SELECT count(*) FROM fulfilment_identity WHERE failed`))
	require.Equal(t, 1, count(`SELECT count(*) FROM fulfilment WHERE failed AND id = $1`, declined))

	// The failed row's action is free again; the others' are held.
	again := func(eventID, paymentID string) bool {
		t.Helper()
		pk, inserted, err := insertEvent(b.ctx, b.tx, db.EventParams{Provider: "stripe", EventID: eventID, Type: "payment_intent.succeeded", PaymentID: paymentID, Payload: []byte(`{}`)})
		require.NoError(t, err)
		require.True(t, inserted)
		_, made, err := db.InsertFulfilment(b.ctx, b.tx, pk, "test", "again")
		require.NoError(t, err)
		return made
	}
	require.True(t, again("evt_declined_2", "pi_declined"), "a failed row frees its action")
	require.False(t, again("evt_done_2", "pi_done"), "a fulfilled row holds its action")
	require.False(t, again("evt_parked_2", "pi_parked"), "a parked row holds its action")

	// failed follows the state, once: no one frees an action by hand, nor
	// takes a failed row's back.
	refused(t, b.ctx, b.tx, `UPDATE fulfilment_identity SET failed = true WHERE id = $1`, done, "failed follows the state")
	refused(t, b.ctx, b.tx, `UPDATE fulfilment_identity SET failed = false WHERE id = $1`, declined, "failed follows the state")
}

// TestTheMoveNamesItsAction: every way a fulfilment is made gives its
// moving row the identity's payment and action name (migration 00051): intake's two
// statements, a revocation, a revocation retried and a write to the
// view. Neither row's name can change. Each action's backlog is counted
// from the moving rows alone: however many are pending, the count reads
// no identity.
func TestTheMoveNamesItsAction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	count := func(query string, args ...any) int {
		t.Helper()
		var n int
		require.NoError(t, tx.QueryRow(ctx, query, args...).Scan(&n))
		return n
	}
	ev := func(id, payment string, actions ...string) db.BatchEvent {
		return db.BatchEvent{Deliveries: 1, EventParams: db.EventParams{Provider: "stripe", EventID: id, Type: "t", PaymentID: payment, Payload: []byte(`{}`)},
			Purchase: &db.PurchaseRecord{Payment: db.Payment{Provider: "stripe", PaymentID: payment}, Actions: actions, Routes: "r"}}
	}
	// Intake, the longer way and the plain batch.
	stored, err := db.InsertEvents(ctx, tx, []db.BatchEvent{ev("evt_long", "pi_long", "fulfil", "licence")})
	require.NoError(t, err)
	born, err := db.InsertFulfilments(ctx, tx, []db.BatchFulfilment{{EventPK: stored[0].ID, Actor: "test"}}, db.Birth{Reason: "test"})
	require.NoError(t, err)
	require.Len(t, born, 2)
	_, born, err = db.RecordPlainBatch(ctx, tx, []db.BatchEvent{ev("evt_plain", "pi_plain", "seats", "mail")}, []string{"test"}, db.Birth{Reason: "test"})
	require.NoError(t, err)
	require.Len(t, born, 2)

	// An operator's write to the view, fulfilled; its payment refunded:
	// the revocation is made, declined, and made again.
	_, err = tx.Exec(ctx, `
		WITH e AS (INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body)
			VALUES ('stripe', 'evt_by_hand', 't', 'pi_refunded', '{}') RETURNING id)
		INSERT INTO fulfilment (event_pk, provider, payment_id, state, idempotency_key, action_name)
		SELECT id, 'stripe', 'pi_refunded', 'fulfilled', 'k_by_hand', 'course' FROM e;
		INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body, reversal, reverses, revokes)
		VALUES ('stripe', 'evt_refund', 'charge.refunded', 'pi_refunded', '{}', 'refund', 'pi_refunded', '{course}')`)
	require.NoError(t, err)
	revoked, err := db.CreateRevocations(ctx, tx, "test", "a revocation", nil)
	require.NoError(t, err)
	require.Len(t, revoked, 1)
	_, err = db.ClaimManyForDispatch(ctx, tx, []db.ClaimParams{{ID: revoked[0], Actor: "w", Timeout: time.Minute}})
	require.NoError(t, err)
	declined, err := db.TransitMany(ctx, tx, []db.TransitionParams{{ID: revoked[0], From: state.Dispatching, To: state.Failed, Attempt: 1, Actor: "w", Reason: "declined"}})
	require.NoError(t, err)
	again, err := db.RetryRevocation(ctx, tx, declined[revoked[0]], "alice", "retried")
	require.NoError(t, err)
	require.NotEmpty(t, again)

	require.Equal(t, 7, count(`SELECT count(*) FROM fulfilment_move`))
	require.Zero(t, count(`SELECT count(*) FROM fulfilment_identity i JOIN fulfilment_move m USING (id) WHERE (m.provider, m.payment_id, m.action_name) IS DISTINCT FROM (i.provider, i.payment_id, i.action_name)`),
		"a moving row that does not name its identity's payment and action")
	require.Equal(t, 3, count(`SELECT count(*) FROM fulfilment_move WHERE action_name = 'course'`), "the fulfilment and both revocations")
	require.Equal(t, 2, count(`SELECT count(*) FROM fulfilment_move WHERE action_name = 'course' AND action = 'revoke'`))

	// Neither copy of the payment or the name changes.
	for _, stmt := range []string{
		`UPDATE fulfilment_move SET action_name = 'other' WHERE id = $1`,
		`UPDATE fulfilment_move SET payment_id = 'pi_other' WHERE id = $1`,
		`UPDATE fulfilment_move SET provider = 'paddle' WHERE id = $1`,
		`UPDATE fulfilment_identity SET action_name = 'other' WHERE id = $1`,
		`UPDATE fulfilment SET action_name = 'other' WHERE id = $1`,
	} {
		refused(t, ctx, tx, stmt, again, "immutable")
	}

	// A backlog of 2,000 more, pending: each action's count reads none of
	// the identities.
	_, err = tx.Exec(ctx, `
		WITH e AS (INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body)
			SELECT 'stripe', 'evt_b_' || g, 't', 'pi_b_' || g, '{}' FROM generate_series(1, 2000) g RETURNING id, payment_id)
		INSERT INTO fulfilment (event_pk, provider, payment_id, idempotency_key, action_name)
		SELECT id, 'stripe', payment_id, 'k_' || payment_id, 'licence' FROM e;
		ANALYZE fulfilment_identity; ANALYZE fulfilment_move`)
	require.NoError(t, err)
	before := rowsRead(t, tx, "fulfilment_identity")
	st, err := db.GetStats(ctx, tx)
	require.NoError(t, err)
	require.Zero(t, rowsRead(t, tx, "fulfilment_identity")-before, "identities read to count each action's backlog")
	byAction := map[string]int{}
	for _, l := range st.Live {
		if l.State == state.Pending {
			byAction[l.Action] += l.Count
		}
	}
	require.Equal(t, map[string]int{"fulfil": 1, "licence": 2001, "seats": 1, "mail": 1, "course": 1}, byAction)
}

// refused runs stmt on id inside a savepoint of tx and checks that a guard
// refuses it (check_violation, with message in its text), then rolls back
// to go on.
func refused(t *testing.T, ctx context.Context, tx pgx.Tx, stmt, id, message string) {
	t.Helper()
	_, err := tx.Exec(ctx, `SAVEPOINT refused`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, stmt, id)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, stmt)
	require.Equal(t, "23514", pgErr.Code, stmt)
	require.Contains(t, pgErr.Message, message, stmt)
	_, err = tx.Exec(ctx, `ROLLBACK TO SAVEPOINT refused`)
	require.NoError(t, err)
}
