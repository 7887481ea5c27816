package db_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
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
	refused := func(stmt, id string) {
		t.Helper()
		_, err := b.tx.Exec(b.ctx, `SAVEPOINT hand`)
		require.NoError(t, err)
		_, err = b.tx.Exec(b.ctx, stmt, id)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, stmt)
		require.Equal(t, "23514", pgErr.Code)
		require.Contains(t, pgErr.Message, "failed follows the state")
		_, err = b.tx.Exec(b.ctx, `ROLLBACK TO SAVEPOINT hand`)
		require.NoError(t, err)
	}
	refused(`UPDATE fulfilment_identity SET failed = true WHERE id = $1`, done)
	refused(`UPDATE fulfilment_identity SET failed = false WHERE id = $1`, declined)
}
