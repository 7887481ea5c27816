package db_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
)

// TestKeysAreInlined: the key functions give the keys they always gave,
// NULL for any NULL argument as before, and Postgres inlines them into the
// statements that call them (migration 00045): no function executor, no
// statement of their own, per fulfilment made.
func TestKeysAreInlined(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)

	// The bodies as migrations 00019, 00022 and 00039 wrote them, the
	// bigint joined to text by anytextcat.
	const before = `
		SELECT 'gk1_' || left(encode(sha256(convert_to('guardian/v1:' || p || ':' || d || ':' || pay, 'UTF8')), 'hex'), 40),
		       'gk1_' || left(encode(sha256(convert_to('guardian/v1/revoke:' || p || ':' || d || ':' || pay, 'UTF8')), 'hex'), 40),
		       CASE WHEN a = 'fulfil' THEN 'gk1_' || left(encode(sha256(convert_to('guardian/v1:' || p || ':' || d || ':' || pay, 'UTF8')), 'hex'), 40)
		            ELSE 'gk1_' || left(encode(sha256(convert_to('guardian/v1/action:' || a || ':' || p || ':' || d || ':' || pay, 'UTF8')), 'hex'), 40) END,
		       CASE WHEN a = 'fulfil' THEN 'gk1_' || left(encode(sha256(convert_to('guardian/v1/revoke:' || p || ':' || d || ':' || pay, 'UTF8')), 'hex'), 40)
		            ELSE 'gk1_' || left(encode(sha256(convert_to('guardian/v1/action-revoke:' || a || ':' || p || ':' || d || ':' || pay, 'UTF8')), 'hex'), 40) END
		FROM (SELECT $1::text AS p, $2::text AS pay, $3::text AS a, $4::bigint AS d) v`
	const now = `SELECT guardian_idempotency_key($1, $2, $4), guardian_revoke_key($1, $2, $4),
		guardian_action_key($1, $2, $3, $4), guardian_action_revoke_key($1, $2, $3, $4)`
	str := func(s string) *string { return &s }
	num := func(n int64) *int64 { return &n }
	for _, c := range []struct {
		provider, payment, action *string
		declined                  *int64
	}{
		{str("stripe"), str("pi_1"), str("fulfil"), num(0)},
		{str("stripe"), str("pi_1"), str("licence"), num(0)},
		{str("paddle"), str("txn_01h~2"), str("email_receipt"), num(3)},
		{str("adyen"), str("8816:x"), str("fulfil"), num(12)},
		{nil, str("pi_1"), str("licence"), num(0)},
		{str("stripe"), nil, str("fulfil"), num(0)},
		{str("stripe"), str("pi_1"), nil, num(0)},
		{str("stripe"), str("pi_1"), str("licence"), nil},
	} {
		var want, got [4]*string
		require.NoError(t, tx.QueryRow(ctx, before, c.provider, c.payment, c.action, c.declined).Scan(&want[0], &want[1], &want[2], &want[3]))
		require.NoError(t, tx.QueryRow(ctx, now, c.provider, c.payment, c.action, c.declined).Scan(&got[0], &got[1], &got[2], &got[3]))
		require.Equal(t, want, got, "keys of %v %v %v %v", c.provider, c.payment, c.action, c.declined)
	}

	var plan strings.Builder
	rows, err := tx.Query(ctx, `EXPLAIN (VERBOSE, COSTS OFF)
		SELECT guardian_action_key(provider, payment_id, event_type, id), guardian_action_revoke_key(provider, payment_id, event_type, id),
		       guardian_idempotency_key(provider, payment_id, id), guardian_revoke_key(provider, payment_id, id)
		FROM webhook_event`)
	require.NoError(t, err)
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan.WriteString(line + "\n")
	}
	require.NoError(t, rows.Err())
	require.Contains(t, plan.String(), "sha256", "the plan computes the keys itself")
	require.NotContains(t, plan.String(), "guardian_", "a key function was not inlined:\n%s", plan.String())
}

// TestMakingAFulfilmentAsksForItsReversalsOnce: making a payment's
// fulfilments asks once for each action whether a stored event took it
// back (one probe of the reversals' index a row), by both ways of making
// them. The question sat in a lateral subquery that Postgres flattened,
// copying it into both places that read its answer: every row probed the
// index twice.
func TestMakingAFulfilmentAsksForItsReversalsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	ev := func(id, payment string) db.BatchEvent {
		return db.BatchEvent{Deliveries: 1, EventParams: db.EventParams{Provider: "stripe", EventID: id, Type: "t", PaymentID: payment, Payload: []byte(`{}`)},
			Purchase: &db.PurchaseRecord{Payment: db.Payment{Provider: "stripe", PaymentID: payment}, Actions: []string{"fulfil", "licence"}, Routes: "r"}}
	}
	probes := func() int {
		t.Helper()
		var n int
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_stat_get_xact_numscans('webhook_event_reversals'::regclass)`).Scan(&n))
		return n
	}
	stored, err := db.InsertEvents(ctx, tx, []db.BatchEvent{ev("evt_a", "pi_a"), ev("evt_b", "pi_b"), ev("evt_c", "pi_c")})
	require.NoError(t, err)
	before := probes()
	var items []db.BatchFulfilment
	for _, s := range stored {
		items = append(items, db.BatchFulfilment{EventPK: s.ID, Actor: "test"})
	}
	born, err := db.InsertFulfilments(ctx, tx, items, db.Birth{Reason: "test"})
	require.NoError(t, err)
	require.Len(t, born, 6)
	require.Equal(t, 6, probes()-before, "probes of the reversals to make six fulfilments")

	before = probes()
	_, born, err = db.RecordPlainBatch(ctx, tx, []db.BatchEvent{ev("evt_d", "pi_d"), ev("evt_e", "pi_e"), ev("evt_f", "pi_f")},
		[]string{"test", "test", "test"}, db.Birth{Reason: "test"})
	require.NoError(t, err)
	require.Len(t, born, 6)
	require.Equal(t, 6, probes()-before, "probes of the reversals to take in three payments of two actions each")
}

// TestMakingFulfilmentsCallsNoKeyFunction: both ways intake makes
// fulfilments (InsertFulfilments, and RecordPlainBatch's plain batch)
// compute each key inline. Postgres counts the calls of a function it did
// not inline (track_functions): an argument that was a subquery, used
// twice in the key's body, once made it call guardian_action_key per
// fulfilment, a statement of its own each time.
func TestMakingFulfilmentsCallsNoKeyFunction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	_, err := tx.Exec(ctx, `SET LOCAL track_functions = 'all'`)
	require.NoError(t, err)
	ev := func(id, payment string) db.BatchEvent {
		return db.BatchEvent{Deliveries: 1, EventParams: db.EventParams{Provider: "stripe", EventID: id, Type: "t", PaymentID: payment, Payload: []byte(`{}`)},
			Purchase: &db.PurchaseRecord{Payment: db.Payment{Provider: "stripe", PaymentID: payment}, Actions: []string{"fulfil", "licence"}, Routes: "r"}}
	}
	stored, err := db.InsertEvents(ctx, tx, []db.BatchEvent{ev("evt_long", "pi_long")})
	require.NoError(t, err)
	born, err := db.InsertFulfilments(ctx, tx, []db.BatchFulfilment{{EventPK: stored[0].ID, Actor: "test"}}, db.Birth{Reason: "test"})
	require.NoError(t, err)
	require.Len(t, born, 2)
	_, born, err = db.RecordPlainBatch(ctx, tx, []db.BatchEvent{ev("evt_plain", "pi_plain")}, []string{"test"}, db.Birth{Reason: "test"})
	require.NoError(t, err)
	require.Len(t, born, 2)
	var keyed int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM fulfilment WHERE idempotency_key LIKE 'gk1_%'`).Scan(&keyed))
	require.Equal(t, 4, keyed, "every row has its key")

	rows, err := tx.Query(ctx, `SELECT funcname, calls FROM pg_stat_xact_user_functions WHERE funcname LIKE 'guardian%key'`)
	require.NoError(t, err)
	called, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var name string
		var calls int64
		err := r.Scan(&name, &calls)
		return fmt.Sprintf("%s: %d calls", name, calls), err
	})
	require.NoError(t, err)
	require.Empty(t, called, "a key function ran as a function, not inlined")
}
