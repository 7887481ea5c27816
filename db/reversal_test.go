package db_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/db/dbtest"
)

// TestReversalsOfAPaymentAreTheViews: guardian_reversals_of (one payment's
// reversals, migration 00047) gives, for every payment, the rows the
// payment_reversal view gives it: its own reversals, and for a grant again
// its root's but for the root's suspensions; a payment of the same id at
// another provider, none of them.
func TestReversalsOfAPaymentAreTheViews(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	_, err := tx.Exec(ctx, `
		INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body, reversal, reverses, revokes, suspends) VALUES
			('stripe', 'evt_refund_a', 'charge.refunded', 'pi_a', '\x7b7d', 'refund', 'pi_a', '{fulfil}', NULL),
			('stripe', 'evt_dispute_a', 'charge.dispute.created', 'pi_a', '\x7b7d', 'dispute', 'pi_a', '{fulfil,mail}', NULL),
			('stripe', 'evt_end', 'customer.subscription.deleted', 'in_start', '\x7b7d', 'end', 'in_start', '{fulfil}', NULL),
			('stripe', 'evt_pause', 'customer.subscription.paused', 'in_start', '\x7b7d', 'refund', 'in_start', '{fulfil}', 'sub_1'),
			('paddle', 'evt_other', 'transaction.completed', 'pi_a', '\x7b7d', NULL, NULL, NULL, NULL);
		INSERT INTO purchase (provider, payment_id, actions, routes, root) VALUES
			('stripe', 'in_again', '{fulfil}', 'r', 'in_start'),
			('stripe', 'in_start', '{fulfil}', 'r', NULL),
			('stripe', 'pi_none', '{fulfil}', 'r', NULL)`)
	require.NoError(t, err)
	read := func(sql string, args ...any) [][]any {
		rows, err := tx.Query(ctx, sql, args...)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) {
			var id int64
			var event string
			var revokes []string
			err := r.Scan(&id, &event, &revokes)
			return []any{id, event, revokes}, err
		})
		require.NoError(t, err)
		return out
	}
	want := map[string]int{"pi_a": 2, "in_start": 2, "in_again": 1, "pi_none": 0}
	for _, p := range []struct{ provider, payment string }{
		{"stripe", "pi_a"}, {"stripe", "in_start"}, {"stripe", "in_again"}, {"stripe", "pi_none"}, {"paddle", "pi_a"},
	} {
		view := read(`SELECT id, event_id, revokes FROM payment_reversal WHERE provider = $1 AND payment_id = $2 ORDER BY id`, p.provider, p.payment)
		of := read(`SELECT id, event_id, revokes FROM guardian_reversals_of($1, $2) ORDER BY id`, p.provider, p.payment)
		require.Equal(t, view, of, "%s %s", p.provider, p.payment)
		n := want[p.payment]
		if p.provider == "paddle" {
			n = 0
		}
		require.Len(t, of, n, "%s %s", p.provider, p.payment)
	}
}
