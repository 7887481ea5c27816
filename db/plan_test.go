package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
)

// TestLookupsUseIndexes: on 20,000 events and their fulfilments, the
// lookups intake, the operators' pages and search make read through
// indexes, never by scanning a table. An index in another collation than the
// comparison silently turned every duplicate's count into a full scan once
// (a 15x slower Postgres-only duplicate path in `just bench`).
func TestLookupsUseIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	_, err := tx.Exec(ctx, `
		INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body)
		SELECT 'stripe', 'evt_' || md5(g::text), 'checkout.session.completed', 'pi_' || md5(g::text), '\x7b7d'::bytea
		FROM generate_series(1, 20000) g`)
	require.NoError(t, err)
	// Settled one a minute back, as a history is: the sweep's round reads
	// the last seconds' of them. One in 400 is parked, so a state's page
	// asks for a few rows among many: asked for a state every row holds,
	// the listing by time alone serves it as well, and the planner's
	// choice between the two follows ANALYZE's sample from run to run.
	_, err = tx.Exec(ctx, `
		INSERT INTO fulfilment (event_pk, provider, payment_id, state, idempotency_key, updated_at)
		SELECT id, provider, payment_id, CASE WHEN n % 400 = 0 THEN 'needs_reconciliation' ELSE 'fulfilled' END,
			guardian_idempotency_key(provider, payment_id, 0), now() - n * interval '1 minute'
		FROM (SELECT *, row_number() OVER () AS n FROM webhook_event) e`)
	require.NoError(t, err)
	// A long history of transitions, one a minute: the overview reads the
	// last hour's.
	_, err = tx.Exec(ctx, `
		INSERT INTO fulfilment_transition (fulfilment_id, from_state, to_state, attempt, actor, reason, created_at)
		SELECT f.id, 'dispatching', 'fulfilled', 1, 'test', 'test', now() - (row_number() OVER ()) * interval '1 minute'
		FROM fulfilment f`)
	require.NoError(t, err)
	// Their purchases, routed one a minute back, as intake records them.
	_, err = tx.Exec(ctx, `
		INSERT INTO purchase (provider, payment_id, actions, routes, routed_at)
		SELECT provider, payment_id, '{fulfil}', 'default', now() - (row_number() OVER ()) * interval '1 minute' FROM webhook_event`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `ANALYZE webhook_event; ANALYZE fulfilment_identity; ANALYZE fulfilment_move; ANALYZE fulfilment_transition; ANALYZE purchase`)
	require.NoError(t, err)
	var known string
	require.NoError(t, tx.QueryRow(ctx, `SELECT event_id FROM webhook_event LIMIT 1`).Scan(&known))

	var knownPK int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT id FROM webhook_event WHERE event_id = $1`, known).Scan(&knownPK))
	var knownFulfilment string
	require.NoError(t, tx.QueryRow(ctx, `SELECT id FROM fulfilment WHERE event_pk = $1`, knownPK).Scan(&knownFulfilment))
	seqScans := func() int {
		var n int
		require.NoError(t, tx.QueryRow(ctx, `SELECT sum(seq_scan) FROM pg_stat_xact_user_tables WHERE relname IN ('webhook_event', 'fulfilment_identity', 'fulfilment_move', 'fulfilment_transition', 'purchase')`).Scan(&n))
		return n
	}
	before := seqScans()
	for name, run := range map[string]func() error{
		"get event": func() error { _, err := db.GetEvent(ctx, tx, "stripe", known); return err },
		"count a duplicate": func() error {
			_, err := db.InsertEvents(ctx, tx, []db.BatchEvent{{EventParams: db.EventParams{Provider: "stripe", EventID: known, Type: "t", Payload: []byte(`{}`)}, Deliveries: 1}})
			return err
		},
		"events by payment prefix": func() error {
			_, _, err := db.ListEvents(ctx, tx, db.EventListParams{PaymentPrefix: "pi_ab"})
			return err
		},
		"events by id prefix": func() error {
			_, _, err := db.ListEvents(ctx, tx, db.EventListParams{EventPrefix: "evt_ab"})
			return err
		},
		"the table's shape (the metrics' read, the overview)": func() error {
			_, err := db.GetStats(ctx, tx)
			return err
		},
		"the last hour's dispatch outcomes (the overview)": func() error {
			_, err := db.DispatchOutcomesSince(ctx, tx, time.Now().Add(-time.Hour))
			return err
		},
		"fulfilments of an event": func() error {
			_, err := db.FulfilmentsByEvent(ctx, tx, knownPK)
			return err
		},
		"claim a fulfilment (the reversal guard included)": func() error {
			_, err := db.ClaimManyForDispatch(ctx, tx, []db.ClaimParams{{ID: knownFulfilment, Actor: "test", Timeout: time.Second}})
			return err
		},
		"take back one payment (intake's reversal)": func() error {
			payment := []db.Payment{{Provider: "stripe", PaymentID: "pi_" + known[len("evt_"):]}}
			if _, err := db.MoveReversedPending(ctx, tx, "test", payment, nil, state.Cancelled, "payment reversed before it went out: never sent"); err != nil {
				return err
			}
			_, err := db.CreateRevocations(ctx, tx, "test", "a revocation", payment)
			return err
		},
		"take back every reversed payment (the sweep)": func() error {
			if _, err := db.MoveReversedPending(ctx, tx, "test", nil, nil, state.Cancelled, "payment reversed before it went out: never sent"); err != nil {
				return err
			}
			_, err := db.CreateRevocations(ctx, tx, "test", "a revocation", nil)
			return err
		},
		// The fulfilment page and GET /api/v1/fulfilments/{id}: the row's
		// history, every row of its payment, and its purchase's actions.
		"a fulfilment's page": func() error {
			f, err := db.GetFulfilment(ctx, tx, knownFulfilment) // db.FulfilmentHistory's reads, in its snapshot
			if err != nil {
				return err
			}
			if _, err := db.Transitions(ctx, tx, f.ID); err != nil {
				return err
			}
			if _, err := db.Checks(ctx, tx, f.ID); err != nil {
				return err
			}
			if _, err := db.FulfilmentsByPayment(ctx, tx, f.Provider, f.PaymentID); err != nil {
				return err
			}
			_, _, err = db.PurchaseActions(ctx, tx, db.Payment{Provider: f.Provider, PaymentID: f.PaymentID})
			return err
		},
		"payments paid before actions (an apply's walk)": func() error {
			_, err := db.PaidBeforeActions(ctx, tx, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), 0, 100)
			return err
		},
		"fulfilments by payment prefix": func() error {
			_, _, err := db.ListFulfilments(ctx, tx, db.ListParams{PaymentPrefix: "pi_ab"})
			return err
		},
		// The listings an operator filters (migration 00025): each returns
		// its first page in its order without sorting or scanning for
		// matches, also when nothing matches.
		"fulfilments of a state, oldest first": func() error {
			_, _, err := db.ListFulfilments(ctx, tx, db.ListParams{State: state.NeedsReconciliation})
			return err
		},
		"fulfilments of a provider with none": func() error {
			_, _, err := db.ListFulfilments(ctx, tx, db.ListParams{Provider: "paypal"})
			return err
		},
		"fulfilments since an hour ago": func() error {
			_, _, err := db.ListFulfilments(ctx, tx, db.ListParams{Since: time.Now().Add(-time.Hour)})
			return err
		},
		"events of a type with none": func() error {
			_, _, err := db.ListEvents(ctx, tx, db.EventListParams{Type: "customer.created"})
			return err
		},
		"events of a provider with none": func() error {
			_, _, err := db.ListEvents(ctx, tx, db.EventListParams{Provider: "paypal"})
			return err
		},
		// The sweep's and the reconciler's rounds: the backlog's rows, in
		// the order each reads them.
		"pending rows without a job (the sweep)": func() error {
			_, err := db.StrandedPending(ctx, tx, db.DispatchJobs{Kind: "dispatch", IDArg: "fulfilment_id"}, time.Minute, 100)
			return err
		},
		"stale claims (the sweep)": func() error {
			_, err := db.SweepStale(ctx, tx, 5*time.Minute, time.Minute, "test", "test", nil)
			return err
		},
		"parked rows due for a lookup (the reconciler)": func() error {
			_, err := db.DueForCheck(ctx, tx, time.Minute, 100, nil)
			return err
		},
		"revocations of the payments settled since the last round (the sweep)": func() error {
			_, err := db.CreateRevocationsSettledSince(ctx, tx, "test", "a revocation", time.Now().Add(-35*time.Second))
			return err
		},
		"events first seen in a day with none": func() error {
			_, _, err := db.ListEvents(ctx, tx, db.EventListParams{Since: time.Now().Add(-48 * time.Hour), Until: time.Now().Add(-24 * time.Hour)})
			return err
		},
		"purchases routed in an hour (an apply's walk)": func() error {
			_, err := db.PurchasesRouted(ctx, tx, time.Now().Add(-time.Hour), time.Now(), db.RoutedPurchase{}, 100)
			return err
		},
		"a subscription's events (its page)": func() error {
			_, err := db.SubscriptionEvents(ctx, tx, db.Subscription{Provider: "stripe", SubscriptionID: "sub_1", PaymentID: "pi_1"})
			return err
		},
		"a payment's refunds so far (a refund's share)": func() error {
			_, err := db.RefundShares(ctx, tx, []db.Payment{{Provider: "stripe", PaymentID: "pi_1"}})
			return err
		},
		"a subscription start's grants again (a take-back of each)": func() error {
			_, err := db.WithGrants(ctx, tx, []db.Payment{{Provider: "stripe", PaymentID: "pi_1"}})
			return err
		},
		"unmapped events (the overview)": func() error {
			_, err := db.CountUnmapped(ctx, tx)
			return err
		},
	} {
		require.NoError(t, run(), name)
		require.Equal(t, before, seqScans(), "%s scanned a table", name)
	}
	// Every index of the tables a payment writes is read by one of the
	// lookups above (Postgres counts the scans of each, this transaction's
	// included), but for the ones named here with why they stay. An index
	// no query needs costs every write of its table (issue 36), so a new
	// one comes with the lookup that reads it, and one whose reader is
	// gone is dropped (migration 00046: the transitions' BRIN on time).
	unreadButKept := []string{
		// The transitions' primary key: each row's identity, for an
		// operator's tools and replication; Guardian reads a row's
		// transitions by (fulfilment_id, id).
		"fulfilment_transition_pkey",
	}
	rows, err := tx.Query(ctx, `SELECT indexrelid::regclass::text FROM pg_index
		WHERE indrelid = ANY ('{webhook_event,fulfilment_identity,fulfilment_move,fulfilment_transition,purchase}'::regclass[])
		  AND pg_stat_get_xact_numscans(indexrelid) = 0`)
	require.NoError(t, err)
	unread, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.ElementsMatch(t, unreadButKept, unread, "indexes no lookup here reads: add the lookup that needs each, or drop it")
}

// refunds returns a transaction holding 5,000 refunded Stripe payments,
// whose fulfilments the statement fulfilments makes from their events.
func refunds(t *testing.T, fulfilments string) pgx.Tx {
	t.Helper()
	tx := dbtest.Tx(t)
	_, err := tx.Exec(context.Background(), `
		INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body, reversal, reverses, revokes)
		SELECT 'stripe', 'evt_rf_' || g, 'charge.refunded', 'pi_rf_' || g, '\x7b7d'::bytea, 'refund', 'pi_rf_' || g, '{fulfil}'
		FROM generate_series(1, 5000) g;
	`+fulfilments+`;
		ANALYZE webhook_event; ANALYZE fulfilment_identity; ANALYZE fulfilment_move`)
	require.NoError(t, err)
	return tx
}

// rowsRead counts the rows tx has read so far from the tables
// themselves, by any scan: of the tables named, or of every table.
func rowsRead(t *testing.T, tx pgx.Tx, tables ...string) int {
	t.Helper()
	var n int
	require.NoError(t, tx.QueryRow(context.Background(), `SELECT coalesce(sum(idx_tup_fetch + seq_tup_read), 0) FROM pg_stat_xact_user_tables
		WHERE coalesce(cardinality($1::text[]), 0) = 0 OR relname = ANY($1)`, tables).Scan(&n))
	return n
}

// TestIntakeReadsDoNotGrowWithHistory: creating a new payment's event and
// fulfilment reads a handful of rows, by any scan, however many reversals
// and declined fulfilments its provider has. Its checks once compared
// columns of two collations, which no index serves: each read every
// reversal of the provider (migration 00026), and intake at a million
// payments ran at 0.07x its empty-database speed. The purchase table's
// payment ids were once in the database's collation too (00041).
func TestIntakeReadsDoNotGrowWithHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := refunds(t, `
		INSERT INTO fulfilment (event_pk, provider, payment_id, state, idempotency_key)
		SELECT id, provider, payment_id, 'failed', guardian_idempotency_key(provider, payment_id, 0) FROM webhook_event;
		INSERT INTO purchase (provider, payment_id, actions, routes) SELECT provider, payment_id, '{fulfil}', 'r' FROM webhook_event;
		ANALYZE purchase`)
	before := rowsRead(t, tx)
	events, err := db.InsertEvents(ctx, tx, []db.BatchEvent{{EventParams: db.EventParams{Provider: "stripe", EventID: "evt_new",
		Type: "checkout.session.completed", PaymentID: "pi_new", Payload: []byte(`{}`)}, Deliveries: 1}})
	require.NoError(t, err)
	// The purchase of the new payment and of one with history, recorded
	// with three actions: their rows are read through the partial indexes.
	require.NoError(t, recordPurchases(ctx, tx, []db.PurchaseRecord{
		{Payment: db.Payment{Provider: "stripe", PaymentID: "pi_new"}, Actions: []string{"crm", "fulfil", "mail"}, Routes: "r"},
		{Payment: db.Payment{Provider: "stripe", PaymentID: "pi_rf_7"}, Actions: []string{"crm", "fulfil", "mail"}, Routes: "r"},
	}))
	created, err := db.InsertFulfilments(ctx, tx, []db.BatchFulfilment{{EventPK: events[0].ID, Actor: "test"}}, db.Birth{Reason: "test"})
	require.NoError(t, err)
	require.Len(t, created, 3)
	require.Less(t, rowsRead(t, tx)-before, 50, "rows read to take in one new payment of three actions beside 5,000 reversals, declined keys and purchases")
}

// TestSweepTakeBackReadsRecentWork: the sweep's windowed catch-all for
// revocations reads the fulfilments settled in its window, not every
// reversal ever stored; the full catch-all, which runs once an hour, does.
func TestSweepTakeBackReadsRecentWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Fulfilled and taken back a day ago.
	tx := refunds(t, `
		INSERT INTO fulfilment (event_pk, provider, payment_id, state, idempotency_key, action, created_at, updated_at)
		SELECT id, provider, payment_id, 'fulfilled', guardian_idempotency_key(provider, payment_id, 0), a, now() - interval '1 day', now() - interval '1 day'
		FROM webhook_event, (VALUES ('fulfil'), ('revoke')) v(a)`)
	before := rowsRead(t, tx)
	created, err := db.CreateRevocationsSettledSince(ctx, tx, "test", "a revocation", time.Now().Add(-10*time.Minute))
	require.NoError(t, err)
	require.Empty(t, created)
	require.Less(t, rowsRead(t, tx)-before, 50, "rows read by the windowed catch-all beside 5,000 old reversals")
	before = rowsRead(t, tx)
	_, err = db.CreateRevocations(ctx, tx, "test", "a revocation", nil)
	require.NoError(t, err)
	require.Greater(t, rowsRead(t, tx)-before, 5000, "the full catch-all reads every reversal: why it runs once an hour")
}

// TestTheWindowedRoundReadsTheMovingRows: the sweep's round over the
// fulfilments settled in its window reads them from their moving rows
// alone, each carrying its payment (migration 00051). With more in the
// window than it asks one by one, it hashes them against every reversal
// and reads no identity but those of the payments a reversal names.
// Through the view, the planner probed each reversal's identity and then
// its moving row: 5.0 s a round at ten million payments.
func TestTheWindowedRoundReadsTheMovingRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// 5,000 refunded payments fulfilled a day ago, one of them settled
	// again now (as a parked fulfilment is), and 2,000 others fulfilled
	// now, none refunded.
	tx := refunds(t, `
		INSERT INTO fulfilment (event_pk, provider, payment_id, state, idempotency_key, created_at, updated_at)
		SELECT id, provider, payment_id, 'fulfilled', guardian_idempotency_key(provider, payment_id, 0), now() - interval '1 day', now() - interval '1 day'
		FROM webhook_event;
		UPDATE fulfilment_move SET updated_at = now() WHERE payment_id = 'pi_rf_1';
		WITH e AS (INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body)
			SELECT 'stripe', 'evt_ok_' || g, 't', 'pi_ok_' || g, '\x7b7d'::bytea FROM generate_series(1, 2000) g RETURNING id, provider, payment_id)
		INSERT INTO fulfilment (event_pk, provider, payment_id, state, idempotency_key)
		SELECT id, provider, payment_id, 'fulfilled', guardian_idempotency_key(provider, payment_id, 0) FROM e`)
	before := rowsRead(t, tx, "fulfilment_identity")
	created, err := db.CreateRevocationsSettledSince(ctx, tx, "test", "a revocation", time.Now().Add(-time.Minute))
	require.NoError(t, err)
	require.Len(t, created, 1, "the refunded payment settled in the window is taken back")
	require.Less(t, rowsRead(t, tx, "fulfilment_identity")-before, 10, "identities read by a round over 2,001 settled rows beside 5,000 reversals")
}

// TestTheRoundOverPendingReadsTheMovingRows: the sweep's round over every
// pending row (db.MoveReversedPending for every payment), asking each for
// its own reversals (a backlog of 499 beside 5,000 reversals), finds them,
// their payments and actions in fulfilment_move alone: it reads no
// identity but the moved row's. Joined to the identities, it read two for
// each pending row (1,004).
func TestTheRoundOverPendingReadsTheMovingRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// 5,000 refunded payments, one of them pending, among 498 pending ones
	// not refunded.
	tx := refunds(t, `
		INSERT INTO fulfilment (event_pk, provider, payment_id, state, idempotency_key)
		SELECT id, provider, payment_id, 'pending', guardian_idempotency_key(provider, payment_id, 0)
		FROM webhook_event WHERE payment_id = 'pi_rf_1';
		WITH e AS (INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body)
			SELECT 'stripe', 'evt_ok_' || g, 't', 'pi_ok_' || g, '\x7b7d'::bytea FROM generate_series(1, 498) g RETURNING id, provider, payment_id)
		INSERT INTO fulfilment (event_pk, provider, payment_id, state, idempotency_key)
		SELECT id, provider, payment_id, 'pending', guardian_idempotency_key(provider, payment_id, 0) FROM e`)
	before := rowsRead(t, tx, "fulfilment_identity")
	stopped, err := db.MoveReversedPending(ctx, tx, "test", nil, nil, state.Cancelled, "payment reversed before it went out: never sent")
	require.NoError(t, err)
	require.Len(t, stopped, 1, "the refunded payment's pending row")
	require.Less(t, rowsRead(t, tx, "fulfilment_identity")-before, 10, "identities read by a round over 499 pending rows")
	var moved string
	require.NoError(t, tx.QueryRow(ctx, `SELECT state FROM fulfilment_move WHERE payment_id = 'pi_rf_1'`).Scan(&moved))
	require.Equal(t, "cancelled", moved)
}

// TestOverviewReadsFoldedOutcomes: the overview's last hour of dispatch
// outcomes reads the folded minutes and the changes since the last fold,
// not every outcome of the hour. It read every transition of the hour
// once (252 ms at 10 million payments after the bench's own load), then
// every outcome of it (migration 00027), as many as the hour dispatched.
func TestOverviewReadsFoldedOutcomes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	// 5,000 payments claimed and settled by the triggers' own path: each
	// move is an update of the fulfilment.
	_, err := tx.Exec(ctx, `
		INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body)
		SELECT 'stripe', 'evt_' || g, 'checkout.session.completed', 'pi_' || g, '\x7b7d'::bytea FROM generate_series(1, 5000) g;
		INSERT INTO fulfilment (event_pk, provider, payment_id, state, idempotency_key)
		SELECT id, provider, payment_id, 'pending', guardian_idempotency_key(provider, payment_id, 0) FROM webhook_event;
		UPDATE fulfilment SET state = 'dispatching', attempt = 1;
		UPDATE fulfilment SET state = CASE WHEN event_pk % 50 = 0 THEN 'needs_reconciliation' ELSE 'fulfilled' END`)
	require.NoError(t, err)
	want := map[string]int{"fulfilled": 4900, "needs_reconciliation": 100}
	outcomes, err := db.DispatchOutcomesSince(ctx, tx, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Equal(t, want, outcomes, "before the fold, from the changes")
	_, err = db.FoldTally(ctx, tx)
	require.NoError(t, err)
	before := rowsRead(t, tx)
	outcomes, err = db.DispatchOutcomesSince(ctx, tx, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Equal(t, want, outcomes, "after it, from the minutes")
	require.Less(t, rowsRead(t, tx)-before, 50, "rows read for an hour of 5,000 outcomes")
}

// TestTakeBackReadsItsOwnReversals: taking back one payment (intake's
// reversal, a reconciliation) reads that payment's reversals, not every
// reversal stored; so do the sweep's rounds over a quiet database (the two
// payments settled in its window, the one pending row), while a round
// over a burst reads every reversal once, not once for each. The reversals
// are a view of a union (a payment's own, and its root's for a grant
// again, migration 00044); a statement joined to it as a semi join or a
// join cannot pass the payment into it, and read every reversal for each
// row it weighed (db.reversalsRead).
func TestTakeBackReadsItsOwnReversals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := refunds(t, `
		INSERT INTO fulfilment (event_pk, provider, payment_id, state, idempotency_key, created_at, updated_at)
		SELECT id, provider, payment_id, 'fulfilled', guardian_idempotency_key(provider, payment_id, 0), now() - interval '1 day', now() - interval '1 day'
		FROM webhook_event;
		-- One payment of two actions, one pending and one fulfilled, then
		-- refunded; and one just fulfilled, not refunded.
		WITH e AS (
			INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body)
			VALUES ('stripe', 'evt_x', 'checkout.session.completed', 'pi_x', '\x7b7d'), ('stripe', 'evt_y', 'checkout.session.completed', 'pi_y', '\x7b7d')
			RETURNING id, payment_id
		)
		INSERT INTO fulfilment (event_pk, provider, payment_id, action_name, state, idempotency_key)
		SELECT e.id, 'stripe', e.payment_id, a.name, a.state, guardian_action_key('stripe', e.payment_id, a.name, 0)
		FROM e JOIN (VALUES ('pi_x', 'fulfil', 'pending'), ('pi_x', 'mail', 'fulfilled'), ('pi_y', 'fulfil', 'fulfilled')) a(payment, name, state) ON a.payment = e.payment_id;
		INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body, reversal, reverses, revokes)
		VALUES ('stripe', 'evt_x_refund', 'charge.refunded', 'pi_x', '\x7b7d', 'refund', 'pi_x', '{fulfil,mail}')`)
	payment := []db.Payment{{Provider: "stripe", PaymentID: "pi_x"}}

	before := rowsRead(t, tx)
	stopped, err := db.MoveReversedPending(ctx, tx, "test", payment, nil, state.Cancelled, "payment reversed before it went out: never sent")
	require.NoError(t, err)
	require.Len(t, stopped, 1, "the refunded payment's pending action")
	revoking, err := db.CreateRevocations(ctx, tx, "test", "a revocation", payment)
	require.NoError(t, err)
	require.Len(t, revoking, 1, "the refunded payment's fulfilled action")
	require.Less(t, rowsRead(t, tx)-before, 50, "rows read to take back one payment beside 5,000 reversals")

	before = rowsRead(t, tx)
	created, err := db.CreateRevocationsSettledSince(ctx, tx, "test", "a revocation", time.Now().Add(-10*time.Minute))
	require.NoError(t, err)
	require.Len(t, created, 0, "the payment settled in the window is not reversed; the refunded ones settled a day ago")
	require.Less(t, rowsRead(t, tx)-before, 50, "rows read by the windowed catch-all over two payments beside 5,001 reversals")

	// The sweep's round over every pending row: one refunded payment
	// pending, then a burst of 1,500.
	pendingRefunded := func(prefix string, n int) {
		t.Helper()
		_, err := tx.Exec(ctx, `
			WITH e AS (
				INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body)
				SELECT 'stripe', 'evt_' || $1 || g, 'checkout.session.completed', 'pi_' || $1 || g, '\x7b7d' FROM generate_series(1, $2::int) g
				RETURNING id, payment_id
			), f AS (
				INSERT INTO fulfilment (event_pk, provider, payment_id, state, idempotency_key)
				SELECT id, 'stripe', payment_id, 'pending', guardian_idempotency_key('stripe', payment_id, 0) FROM e
			)
			INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body, reversal, reverses, revokes)
			SELECT 'stripe', 'evt_r_' || payment_id, 'charge.refunded', payment_id, '\x7b7d', 'refund', payment_id, '{fulfil}' FROM e`, prefix, n)
		require.NoError(t, err)
	}
	// stopsEvery runs the round and holds it to cancelling the n pending
	// rows, reading fewer than most rows.
	stopsEvery := func(n, most int, read string) {
		t.Helper()
		before := rowsRead(t, tx)
		stopped, err := db.MoveReversedPending(ctx, tx, "test", nil, nil, state.Cancelled, "payment reversed before it went out: never sent")
		require.NoError(t, err)
		require.Len(t, stopped, n, "each refunded payment's pending row")
		require.Less(t, rowsRead(t, tx)-before, most, read)
	}
	pendingRefunded("one_", 1)
	stopsEvery(1, 50, "rows read by the round over every pending row, one of them, beside 5,002 reversals")
	pendingRefunded("burst_", 1500)
	stopsEvery(1500, 20000, "rows read by the round over a burst of 1,500 pending: not every reversal for each")

	// A burst: 1,500 of the refunded payments settle in the window (their
	// refunds came while they were in flight). The round reads every
	// reversal once, and takes back each of them.
	_, err = tx.Exec(ctx, `UPDATE fulfilment SET updated_at = now() WHERE id IN (
		SELECT id FROM fulfilment WHERE payment_id LIKE 'pi_rf_%' ORDER BY payment_id LIMIT 1500)`)
	require.NoError(t, err)
	before = rowsRead(t, tx)
	created, err = db.CreateRevocationsSettledSince(ctx, tx, "test", "a revocation", time.Now().Add(-10*time.Minute))
	require.NoError(t, err)
	require.Len(t, created, 1500, "each refunded payment settled in the window taken back")
	require.Less(t, rowsRead(t, tx)-before, 20000, "rows read by the windowed catch-all over a burst of 1,500: not every reversal for each (7.5 million)")

	// The same burst beside a history of reversals twenty times its size,
	// as the statistics count them: each row asks for its own, and the
	// round reads a few rows for each, never every reversal once (at ten
	// million payments that read took over a second a round). The
	// statistics of fulfilment still count none pending, as a deployment's
	// may long after a backlog forms: the move joins its rows by their
	// key, not through the state's index (3.4 million rows read when it
	// did).
	_, err = tx.Exec(ctx, `
		INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body, reversal, reverses, revokes)
		SELECT 'stripe', 'evt_old_rf_' || g, 'charge.refunded', 'pi_old_' || g, '\x7b7d'::bytea, 'refund', 'pi_old_' || g, '{fulfil}'
		FROM generate_series(1, 24000) g;
		ANALYZE webhook_event`)
	require.NoError(t, err)
	pendingRefunded("beside_", 1500)
	stopsEvery(1500, 20000, "rows read by the round over a burst of 1,500 pending beside 32,000 reversals: each row's own, not every reversal")
}

// TestPruneReadsItsBatch: a round of the body pruner reads the batch it
// walks and what each of its events can be needed by, not every
// fulfilment stored. Weighed in the walk itself, the planner costed the
// check per row of the whole index scan rather than of its LIMIT, and
// read every fulfilment not fulfilled into a hash each batch: a scan of
// the table, 250 ms a batch at a million payments.
func TestPruneReadsItsBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	// 20,000 payments fulfilled past the retention, and 100 of this week.
	_, err := tx.Exec(ctx, `
		INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body, first_seen_at, last_seen_at)
		SELECT 'stripe', 'evt_' || g, 'checkout.session.completed', 'pi_' || g, '\x7b7d'::bytea, t, t
		FROM generate_series(1, 20100) g, LATERAL (SELECT now() - CASE WHEN g <= 20000 THEN interval '100 days' ELSE interval '1 day' END AS t) at;
		INSERT INTO fulfilment (event_pk, provider, payment_id, state, idempotency_key)
		SELECT id, provider, payment_id, 'fulfilled', guardian_idempotency_key(provider, payment_id, 0) FROM webhook_event;
		ANALYZE webhook_event; ANALYZE fulfilment_identity; ANALYZE fulfilment_move`)
	require.NoError(t, err)
	before := rowsRead(t, tx)
	pruned, done, err := db.PruneEventBodiesIn(ctx, tx, time.Now().Add(-90*24*time.Hour), 100)
	require.NoError(t, err)
	require.Equal(t, 100, pruned)
	require.False(t, done)
	require.Less(t, rowsRead(t, tx)-before, 2000, "rows read by a round of 100 beside 20,100 fulfilments")
	var bodies int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM webhook_event WHERE body = '' AND pruned_at IS NOT NULL`).Scan(&bodies))
	require.Equal(t, 100, bodies, "the round's bodies emptied")
}

// TestRoundsReadReversalsFromTheirIndex: the sweep's rounds read every
// reversal from its index alone (migration 00049), not each from its
// event's row: at ten million payments those rows were 100,000 pages
// scattered through 9.4 GB, most of a round's time. The rows are
// committed and vacuumed, as a deployment's history is: an index-only
// read needs the pages marked visible to all.
func TestRoundsReadReversalsFromTheirIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := dbtest.NewDB(t)
	// 6,000 payments fulfilled a day ago and refunded, 3,000 of them
	// settled since the last round (their refunds came while they were in
	// flight); 3,000 more refunded while pending. Each round weighs more
	// rows than a quarter of the 9,000 reversals, so it reads every
	// reversal once (holdsMany). Beside them 60,000 events of other
	// kinds, as a history holds: the reversals are a few of its rows.
	_, err := d.Pool.Exec(ctx, `
		INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body)
		SELECT 'stripe', 'evt_' || g, 'checkout.session.completed', 'pi_' || g, '\x7b7d'::bytea FROM generate_series(1, 9000) g;
		INSERT INTO webhook_event (provider, event_id, event_type, body)
		SELECT 'stripe', 'evt_other_' || g, 'customer.updated', '\x7b7d'::bytea FROM generate_series(1, 60000) g;
		INSERT INTO fulfilment (event_pk, provider, payment_id, state, idempotency_key, created_at, updated_at)
		SELECT id, provider, payment_id, CASE WHEN g > 6000 THEN 'pending' ELSE 'fulfilled' END,
			guardian_idempotency_key(provider, payment_id, 0), now() - interval '1 day',
			CASE WHEN g % 2 = 0 THEN now() ELSE now() - interval '1 day' END
		FROM webhook_event CROSS JOIN LATERAL (SELECT substr(payment_id, 4)::int AS g) n WHERE payment_id IS NOT NULL;
		INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body, reversal, reverses, revokes)
		SELECT 'stripe', 'evt_rf_' || g, 'charge.refunded', 'pi_' || g, '\x7b7d'::bytea, 'refund', 'pi_' || g, '{fulfil}' FROM generate_series(1, 9000) g`)
	require.NoError(t, err)
	// VACUUM leaves a page it cannot lock at once (the background writer
	// may hold it) unmarked: the history is vacuumed until every page of
	// the events is marked, as a deployment's autovacuum gets to in time.
	for attempt := 0; ; attempt++ {
		_, err = d.Pool.Exec(ctx, `VACUUM (ANALYZE) webhook_event, fulfilment_identity, fulfilment_move`)
		require.NoError(t, err)
		var pages, visible int
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT relpages, relallvisible FROM pg_class WHERE relname = 'webhook_event'`).Scan(&pages, &visible))
		if visible == pages {
			break
		}
		require.Less(t, attempt, 10, "VACUUM marked %d of the events' %d pages visible to all", visible, pages)
	}
	tx, err := d.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	eventsRead := func() int { return rowsRead(t, tx, "webhook_event") }
	before := eventsRead()
	stopped, err := db.MoveReversedPending(ctx, tx, "test", nil, nil, state.Cancelled, "payment reversed before it went out: never sent")
	require.NoError(t, err)
	require.Len(t, stopped, 3000, "each refunded payment's pending row")
	require.Less(t, eventsRead()-before, 100, "events' rows read by the round over every pending row: each reversal from its own row, not the index")

	before = eventsRead()
	created, err := db.CreateRevocationsSettledSince(ctx, tx, "test", "a revocation", time.Now().Add(-10*time.Minute))
	require.NoError(t, err)
	require.Len(t, created, 3000, "each refunded payment settled in the window taken back")
	// Each revocation made checks its event's row (its foreign key): the
	// one row a round must read for it.
	require.Less(t, eventsRead()-before, len(created)+100, "events' rows read by the round over every reversal: each from its own row, not the index")

	before = eventsRead()
	created, err = db.CreateRevocations(ctx, tx, "test", "a revocation", nil)
	require.NoError(t, err)
	require.Len(t, created, 3000, "the full round takes back the rest")
	require.Less(t, eventsRead()-before, len(created)+100, "events' rows read by the full round: each reversal from its own row, not the index")
}

// TestClaimReadsItsBatch: a claim reads the rows it claims, by their ids,
// however many are pending and whatever the statistics say of them. With
// statistics taken when none were pending, the claim once read every
// pending row through the state's index for each batch: draining a
// backlog cost its size for every batch, so dispatch slowed as the
// backlog grew.
func TestClaimReadsItsBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	// A history of 50,000 fulfilled payments, analysed with none pending,
	// then a backlog of 3,000 the statistics do not know of.
	_, err := tx.Exec(ctx, `
		WITH e AS (
			INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body)
			SELECT 'stripe', 'evt_' || g, 'checkout.session.completed', 'pi_' || g, '\x7b7d'::bytea FROM generate_series(1, 50000) g
			RETURNING id, provider, payment_id
		)
		INSERT INTO fulfilment (event_pk, provider, payment_id, state, idempotency_key)
		SELECT id, provider, payment_id, 'fulfilled', guardian_idempotency_key(provider, payment_id, 0) FROM e;
		ANALYZE webhook_event; ANALYZE fulfilment_identity; ANALYZE fulfilment_move;
		WITH e AS (
			INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body)
			SELECT 'stripe', 'evt_b' || g, 'checkout.session.completed', 'pi_b' || g, '\x7b7d'::bytea FROM generate_series(1, 3000) g
			RETURNING id, provider, payment_id
		)
		INSERT INTO fulfilment (event_pk, provider, payment_id, idempotency_key)
		SELECT id, provider, payment_id, guardian_idempotency_key(provider, payment_id, 0) FROM e`)
	require.NoError(t, err)
	rows, err := tx.Query(ctx, `SELECT id FROM fulfilment WHERE state = 'pending' ORDER BY id LIMIT 15`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	claims := make([]db.ClaimParams, len(ids))
	for i, id := range ids {
		claims[i] = db.ClaimParams{ID: id, Actor: "test", Timeout: time.Minute}
	}

	before := rowsRead(t, tx, "fulfilment")
	claimed, err := db.ClaimManyForDispatch(ctx, tx, claims)
	require.NoError(t, err)
	require.Len(t, claimed, 15)
	require.Less(t, rowsRead(t, tx, "fulfilment")-before, 100, "fulfilment rows read to claim 15 of a backlog of 3,000")
	// A claim of rows no longer pending moves none, and reads them only.
	before = rowsRead(t, tx, "fulfilment")
	claimed, err = db.ClaimManyForDispatch(ctx, tx, claims)
	require.NoError(t, err)
	require.Empty(t, claimed)
	require.Less(t, rowsRead(t, tx, "fulfilment")-before, 100, "fulfilment rows read to claim 15 already claimed")
}
