package db

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// PurchaseRecord is a purchase about to be recorded as paid: the actions
// its routes named, the routes' digest, and its detail. AwaitingItems,
// when set, records it awaiting its items instead (the provider's object
// whose items its API lists): it pays for no action until RoutePurchase
// decides its actions, and Actions is ignored.
type PurchaseRecord struct {
	Payment
	Actions       []string
	Routes        string
	Detail        []byte
	AwaitingItems string
	// RoutedAt is when the purchase was decided; zero is now. A payment
	// fulfilled before actions existed was decided when it was paid.
	RoutedAt time.Time
}

// RecordPurchases records each purchase not recorded yet with the actions
// given (its routes decide once: a purchase already recorded keeps its
// actions, whatever these say). A payment with fulfilments made before
// actions existed is recorded with the actions of those rows, so an
// upgrade adds no action to a purchase already fulfilled, and awaits
// nothing. Purchases go in in (provider, payment_id) order, so concurrent
// batches cannot deadlock. It returns the purchases it recorded awaiting
// their items, whose fetch the caller enqueues in the same transaction.
func RecordPurchases(ctx context.Context, q DBTX, purchases []PurchaseRecord) ([]Payment, error) {
	rows, err := q.Query(ctx, `
		WITH recorded AS (`+purchaseInsert(`unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[])
			WITH ORDINALITY AS u(p, pay, a, r, d, w, at, ord)`)+`)
		SELECT provider, payment_id FROM recorded WHERE awaiting_items IS NOT NULL`, purchaseColumns(purchases)...)
	if err != nil {
		return nil, wrap("record purchases", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Payment])
	return out, wrap("record purchases", err)
}

// purchaseColumns are purchases as the seven arrays purchaseInsert reads:
// provider, payment, actions (comma-joined), routes, detail, awaiting
// items ("" for none) and routed at (nil for now).
func purchaseColumns(purchases []PurchaseRecord) []any {
	n := len(purchases)
	providers, ids, actions, routes, details, awaiting := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]*string, n), make([]string, n)
	at := make([]*time.Time, n)
	for i, p := range purchases {
		providers[i], ids[i], actions[i], routes[i], awaiting[i] = p.Provider, p.PaymentID, strings.Join(p.Actions, ","), p.Routes, p.AwaitingItems
		if p.Detail != nil {
			d := string(p.Detail)
			details[i] = &d
		}
		if !p.RoutedAt.IsZero() {
			at[i] = &p.RoutedAt
		}
	}
	return []any{providers, ids, actions, routes, details, awaiting, at}
}

// purchaseInsert is RecordPurchases' insert over from, a from-list whose
// purchases are u(p, pay, a, r, d, w, at, ord): purchaseColumns' arrays,
// in their order (of two of one payment, the first is recorded). It
// returns each purchase recorded with its awaiting_items.
func purchaseInsert(from string) string {
	return `
			INSERT INTO purchase (provider, payment_id, actions, routes, detail, awaiting_items, routed_at)
			SELECT DISTINCT ON (u.p, u.pay) u.p, u.pay,
				coalesce(done.actions, CASE WHEN u.w = '' THEN string_to_array(u.a, ',') ELSE '{}' END),
				u.r, u.d::jsonb, CASE WHEN done.actions IS NULL THEN nullif(u.w, '') END, coalesce(u.at, now())
			FROM ` + from + `
				CROSS JOIN LATERAL (
					-- Each half through its partial index (fulfilment_one_per_action,
					-- fulfilment_payment_failed): never a scan of the table.
					SELECT array_agg(DISTINCT a ORDER BY a) AS actions FROM (
						SELECT f.action_name FROM fulfilment_identity f WHERE f.provider = u.p AND f.payment_id = u.pay AND f.action = 'fulfil' AND NOT f.failed
						UNION ALL
						SELECT f.action_name FROM fulfilment_identity f WHERE f.provider = u.p AND f.payment_id = u.pay AND f.action = 'fulfil' AND f.failed) x(a)) done
			ORDER BY u.p, u.pay, u.ord
			ON CONFLICT (provider, payment_id) DO NOTHING
			RETURNING provider, payment_id, awaiting_items`
}

// PurchaseActions returns the actions recorded for a purchase, and whether
// it is recorded.
func PurchaseActions(ctx context.Context, q DBTX, p Payment) ([]string, bool, error) {
	var actions []string
	err := q.QueryRow(ctx, `SELECT actions FROM purchase WHERE provider = $1 AND payment_id = $2`, p.Provider, p.PaymentID).Scan(&actions)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	return actions, err == nil, wrap("read purchase actions", err)
}

// RoutedPurchase is a recorded purchase as an operator's apply reads it.
type RoutedPurchase struct {
	Payment
	Actions  []string
	Detail   []byte
	RoutedAt time.Time
	// Reversed says a stored event takes the purchase back (for any of
	// its actions): nothing is applied to it.
	Reversed bool
}

// PurchasesRouted lists up to limit purchases routed in [since, until)
// (a purchase awaiting its items is not routed yet),
// in (routed_at, provider, payment_id) order, after the one named by
// after (zero: from the start).
func PurchasesRouted(ctx context.Context, q DBTX, since, until time.Time, after RoutedPurchase, limit int) ([]RoutedPurchase, error) {
	rows, err := q.Query(ctx, `
		SELECT p.provider, p.payment_id, p.actions, p.detail, p.routed_at,
			EXISTS (SELECT 1 FROM guardian_reversals_of(p.provider, p.payment_id))
		FROM purchase p
		WHERE p.routed_at >= $1 AND p.routed_at < $2 AND p.awaiting_items IS NULL
		  AND (p.routed_at, p.provider, p.payment_id) > ($3, $4, $5)
		ORDER BY p.routed_at, p.provider, p.payment_id
		LIMIT $6`, since, until, after.RoutedAt, after.Provider, after.PaymentID, limit)
	if err != nil {
		return nil, wrap("list routed purchases", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RoutedPurchase, error) {
		var p RoutedPurchase
		err := r.Scan(&p.Provider, &p.PaymentID, &p.Actions, &p.Detail, &p.RoutedAt, &p.Reversed)
		return p, err
	})
	return out, wrap("list routed purchases", err)
}

// ApplyAction adds action to a recorded purchase that does not pay for it
// yet and is not taken back, recording who applied it (action_applied),
// and returns the purchase's first paid event, whose fulfilment the caller
// makes in the same transaction; 0 when nothing was added (the purchase
// already pays for the action, an apply before added it, it was
// reversed, or it awaits its items: the routes in force when they come
// decide it). The purchase's row lock orders concurrent applies: one adds.
func ApplyAction(ctx context.Context, q DBTX, p Payment, action, operator string) (int64, error) {
	var eventPK int64
	err := q.QueryRow(ctx, `
		WITH added AS (
			UPDATE purchase SET actions = array_append(actions, $3)
			WHERE provider = $1 AND payment_id = $2 AND NOT $3 = ANY(actions) AND awaiting_items IS NULL
			  AND NOT EXISTS (SELECT 1 FROM guardian_reversals_of($1, $2))
			RETURNING provider, payment_id
		), audited AS (
			INSERT INTO action_applied (provider, payment_id, action_name, operator)
			SELECT provider, payment_id, $3, $4 FROM added
		)
		SELECT (SELECT min(e.id) FROM webhook_event e WHERE e.provider = added.provider AND e.payment_id = added.payment_id)
		FROM added`, p.Provider, p.PaymentID, action, operator).Scan(&eventPK)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return eventPK, wrap("apply action", err)
}

// PaidBeforeActions lists, up to limit, the payments fulfilled before
// actions existed that have no recorded purchase yet, whose first
// fulfilled event was first seen in [since, until), in that event's id
// order after afterID: each as its event, the actions of its rows, and
// whether a stored event takes it back. An apply records and weighs them
// as it does the purchases it finds recorded.
func PaidBeforeActions(ctx context.Context, q DBTX, since, until time.Time, afterID int64, limit int) ([]UnrecordedPurchase, error) {
	rows, err := q.Query(ctx, `
		SELECT `+eventColumns+`,
			-- A payment's rows in two halves, each through its partial
			-- index (FulfilmentsByPayment): asked for in one, a scan.
			(SELECT array_agg(DISTINCT a ORDER BY a) FROM (
				SELECT f.action_name FROM fulfilment_identity f
				WHERE f.provider = e.provider AND f.payment_id = e.payment_id AND f.action = 'fulfil' AND NOT f.failed
				UNION ALL
				SELECT f.action_name FROM fulfilment_identity f
				WHERE f.provider = e.provider AND f.payment_id = e.payment_id AND f.action = 'fulfil' AND f.failed) x(a)),
			EXISTS (SELECT 1 FROM guardian_reversals_of(e.provider, e.payment_id))
		FROM webhook_event e
		WHERE e.first_seen_at >= $1 AND e.first_seen_at < $2 AND e.id > $3 AND e.payment_id IS NOT NULL
		  AND NOT EXISTS (SELECT 1 FROM purchase p WHERE p.provider = e.provider AND p.payment_id = e.payment_id)
		  AND e.id = least(
			(SELECT min(f.event_pk) FROM fulfilment_identity f WHERE f.provider = e.provider AND f.payment_id = e.payment_id AND f.action = 'fulfil' AND NOT f.failed),
			(SELECT min(f.event_pk) FROM fulfilment_identity f WHERE f.provider = e.provider AND f.payment_id = e.payment_id AND f.action = 'fulfil' AND f.failed))
		ORDER BY e.id LIMIT $4`, since, until, afterID, limit)
	if err != nil {
		return nil, wrap("list payments paid before actions", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (UnrecordedPurchase, error) {
		var u UnrecordedPurchase
		var err error
		u.Event, err = scanEvent(r, &u.Actions, &u.Reversed)
		return u, err
	})
	return out, wrap("list payments paid before actions", err)
}

// UnrecordedPurchase is a payment fulfilled before actions existed, with
// no recorded purchase (PaidBeforeActions).
type UnrecordedPurchase struct {
	Event    Event
	Actions  []string
	Reversed bool
}

// AwaitingPurchase is a purchase recorded awaiting its items: the
// provider's object whose items are awaited (Ref), its detail as
// recorded, since when it awaits, and its failed fetches.
type AwaitingPurchase struct {
	Payment
	Ref      string
	Detail   []byte
	Since    time.Time
	Attempts int
	Error    string
	TriedAt  *time.Time
}

const awaitingColumns = `provider, payment_id, awaiting_items, detail, routed_at, routing_attempts, coalesce(routing_error, ''), routing_tried_at`

func scanAwaiting(r pgx.CollectableRow) (AwaitingPurchase, error) {
	var a AwaitingPurchase
	err := r.Scan(&a.Provider, &a.PaymentID, &a.Ref, &a.Detail, &a.Since, &a.Attempts, &a.Error, &a.TriedAt)
	return a, err
}

// LockAwaiting reads p if it still awaits its items, holding its row for
// the rest of q's transaction: of two routings of one purchase, the second
// finds it routed. False when p is routed, or was never recorded.
func LockAwaiting(ctx context.Context, q DBTX, p Payment) (AwaitingPurchase, bool, error) {
	rows, err := q.Query(ctx, `SELECT `+awaitingColumns+` FROM purchase
		WHERE provider = $1 AND payment_id = $2 AND awaiting_items IS NOT NULL FOR UPDATE`, p.Provider, p.PaymentID)
	if err != nil {
		return AwaitingPurchase{}, false, wrap("read awaiting purchase", err)
	}
	a, err := pgx.CollectExactlyOneRow(rows, scanAwaiting)
	if errors.Is(err, pgx.ErrNoRows) {
		return AwaitingPurchase{}, false, nil
	}
	return a, err == nil, wrap("read awaiting purchase", err)
}

// RoutePurchase decides the actions of a purchase awaiting its items, with
// its detail as the fetch completed it: it is routed from now (an apply's
// window reads routed_at). The caller holds the row (LockAwaiting) and
// makes the actions' fulfilments in the same transaction, of the event it
// returns: the purchase's first paid one.
func RoutePurchase(ctx context.Context, q DBTX, p Payment, actions []string, routes string, detail []byte) (int64, error) {
	var eventPK int64
	var d *string
	if detail != nil {
		j := string(detail)
		d = &j
	}
	err := q.QueryRow(ctx, `
		WITH routed AS (
			UPDATE purchase SET actions = $3, routes = $4, detail = $5::jsonb, awaiting_items = NULL, routed_at = now()
			WHERE provider = $1 AND payment_id = $2 AND awaiting_items IS NOT NULL
			RETURNING provider, payment_id
		)
		SELECT (SELECT min(e.id) FROM webhook_event e WHERE e.provider = routed.provider AND e.payment_id = routed.payment_id)
		FROM routed`, p.Provider, p.PaymentID, actions, routes, d).Scan(&eventPK)
	if errors.Is(err, pgx.ErrNoRows) {
		err = ErrNotFound
	}
	return eventPK, wrap("route purchase", err)
}

// AwaitingUntried returns, up to limit, the purchases that have awaited
// their items for at least after with no fetch tried in that time.
func AwaitingUntried(ctx context.Context, q DBTX, after time.Duration, limit int) ([]Payment, error) {
	rows, err := q.Query(ctx, `
		SELECT provider, payment_id FROM purchase
		WHERE awaiting_items IS NOT NULL AND routed_at < now() - make_interval(secs => $1)
		  AND (routing_tried_at IS NULL OR routing_tried_at < now() - make_interval(secs => $1))
		ORDER BY routed_at LIMIT $2`, after.Seconds(), limit)
	if err != nil {
		return nil, wrap("list untried awaiting purchases", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Payment])
	return out, wrap("list untried awaiting purchases", err)
}

// NoteRoutingFailure records that a fetch of an awaiting purchase's items
// failed, and why, for operators; it changes nothing else.
func NoteRoutingFailure(ctx context.Context, q DBTX, p Payment, why string) error {
	_, err := q.Exec(ctx, `
		UPDATE purchase SET routing_attempts = routing_attempts + 1, routing_error = $3, routing_tried_at = now()
		WHERE provider = $1 AND payment_id = $2 AND awaiting_items IS NOT NULL`, p.Provider, p.PaymentID, why)
	return wrap("note routing failure", err)
}

// PurchasesAwaiting lists up to limit purchases awaiting their items,
// longest waiting first, and how many await in all.
func PurchasesAwaiting(ctx context.Context, q DBTX, limit int) ([]AwaitingPurchase, int, error) {
	var total int
	if err := q.QueryRow(ctx, `SELECT count(*) FROM purchase WHERE awaiting_items IS NOT NULL`).Scan(&total); err != nil {
		return nil, 0, wrap("count awaiting purchases", err)
	}
	rows, err := q.Query(ctx, `SELECT `+awaitingColumns+` FROM purchase
		WHERE awaiting_items IS NOT NULL ORDER BY routed_at, provider, payment_id LIMIT $1`, limit)
	if err != nil {
		return nil, 0, wrap("list awaiting purchases", err)
	}
	out, err := pgx.CollectRows(rows, scanAwaiting)
	return out, total, wrap("list awaiting purchases", err)
}
