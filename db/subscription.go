package db

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// SubscriptionStart links a subscription, by its provider's id, to the
// purchase its start paid for.
type SubscriptionStart struct {
	Provider, SubscriptionID, PaymentID string
}

// SubscriptionRef names a subscription by its provider's id.
type SubscriptionRef struct {
	Provider, SubscriptionID string
}

// SubscriptionInvoice is what an event states about one of a
// subscription's invoices (provider.Invoice): the subscription it bills
// and whether it is the first, or the payment that paid it, or both.
type SubscriptionInvoice struct {
	Provider, Invoice, Payment, SubscriptionID string
	First                                      bool
}

// Links are what a transaction records of subscriptions' lives: starts
// linked to the purchases they paid for, ends, invoices, and the payments
// the transaction's refunds and disputes name (Named), which are resolved
// through the invoices to the purchases they paid for.
type Links struct {
	Starts   []SubscriptionStart
	Ends     []SubscriptionRef
	Invoices []SubscriptionInvoice
	Named    []Payment
}

func (l Links) empty() bool {
	return len(l.Starts) == 0 && len(l.Ends) == 0 && len(l.Invoices) == 0 && len(l.Named) == 0
}

// LinkSubscriptions records, in q's transaction, each start's link (the
// first recorded stays: a subscription starts once) and each invoice's
// facts (each kept as first stated), then makes each stored end of a
// linked subscription that is not yet resolved, and takes something back
// (its revokes), reverse the purchase the start paid for, and each stored
// refund or dispute naming a subscription's payment name the purchase that
// payment paid for: the start's for the first invoice's, the invoice for
// a renewal's. It returns what it linked and the purchases it made
// reversed, for the caller to take back in the same transaction, and
// those whose refunds it moved, for the caller to weigh.
//
// Every transaction that writes these facts or reads them to resolve
// takes its locks in one order (no two deadlock), and reads after it
// holds them, so that of two transactions recording facts that together
// resolve a reversal, the second always sees the first:
//  1. the invoices' rows, sorted (the upsert);
//  2. the subscriptions named by starts, ends and invoices, by an advisory
//     lock each: a start and an end of one subscription recorded at once
//     are serialized, and so are a start and the facts of its invoices;
//  3. the payments and invoices to resolve, by an advisory lock each (the
//     refund's side takes these alone): those named, those of the
//     invoices recorded, and those of the first invoices of the
//     subscriptions linked now, read after 2.
//
// A start recorded with its end already stored makes the purchase
// reversed before its fulfilments are made (InsertFulfilments reads
// reverses): an end before the start grants nothing.
func LinkSubscriptions(ctx context.Context, q DBTX, l Links) (LinkResult, error) {
	var res LinkResult
	if l.empty() {
		return res, nil
	}
	invoices, err := recordInvoices(ctx, q, l.Invoices)
	if err != nil {
		return res, err
	}
	var providers, subs, payments []string
	for _, s := range l.Starts {
		providers, subs, payments = append(providers, s.Provider), append(subs, s.SubscriptionID), append(payments, s.PaymentID)
	}
	for _, e := range l.Ends {
		providers, subs, payments = append(providers, e.Provider), append(subs, e.SubscriptionID), append(payments, "")
	}
	for _, in := range invoices {
		if in.SubscriptionID != "" {
			providers, subs, payments = append(providers, in.Provider), append(subs, in.SubscriptionID), append(payments, "")
		}
	}
	if _, err := q.Exec(ctx, `
		SELECT pg_advisory_xact_lock(k) FROM (
			SELECT DISTINCT hashtextextended('guardian/subscription:' || p || ':' || s, 0) AS k
			FROM unnest($1::text[], $2::text[]) AS u(p, s) ORDER BY k
		) held`, providers, subs); err != nil {
		return res, wrap("hold subscriptions", err)
	}
	rows, err := q.Query(ctx, `
		INSERT INTO subscription (provider, subscription_id, payment_id)
		SELECT DISTINCT ON (p, s) p, s, pay FROM unnest($1::text[], $2::text[], $3::text[]) AS u(p, s, pay)
		WHERE pay <> '' ORDER BY p, s
		ON CONFLICT (provider, subscription_id) DO NOTHING
		RETURNING provider, subscription_id`, providers, subs, payments)
	if err != nil {
		return res, wrap("record subscriptions", err)
	}
	if res.Linked, err = pgx.CollectRows(rows, pgx.RowToStructByPos[SubscriptionRef]); err != nil {
		return res, wrap("record subscriptions", err)
	}
	rows, err = q.Query(ctx, `
		WITH named AS (
			SELECT DISTINCT p, s FROM unnest($1::text[], $2::text[]) AS u(p, s)
		), resolved AS (
			UPDATE webhook_event e SET reverses = sub.payment_id
			FROM named JOIN subscription sub ON sub.provider = named.p AND sub.subscription_id = named.s
			WHERE e.provider = sub.provider AND e.ends = sub.subscription_id AND e.reverses IS NULL AND e.revokes IS NOT NULL
			RETURNING e.provider, e.reverses
		)
		SELECT DISTINCT provider, reverses FROM resolved ORDER BY 1, 2`, providers, subs)
	if err != nil {
		return res, wrap("resolve subscription ends", err)
	}
	if res.Reversed, err = pgx.CollectRows(rows, pgx.RowToStructByPos[Payment]); err != nil {
		return res, wrap("resolve subscription ends", err)
	}
	return res, resolvePayments(ctx, q, l.Named, invoices, res.Linked, &res)
}

// recordInvoices records the invoices' facts, merged per invoice, in
// one order, and returns each invoice's row as it now stands.
func recordInvoices(ctx context.Context, q DBTX, invoices []SubscriptionInvoice) ([]SubscriptionInvoice, error) {
	if len(invoices) == 0 {
		return nil, nil
	}
	merged := map[[2]string]SubscriptionInvoice{}
	for _, in := range invoices {
		k := [2]string{in.Provider, in.Invoice}
		m := merged[k]
		m.Provider, m.Invoice, m.Payment = in.Provider, in.Invoice, cmp.Or(m.Payment, in.Payment)
		if m.SubscriptionID == "" {
			m.SubscriptionID, m.First = in.SubscriptionID, in.First
		}
		merged[k] = m
	}
	var providers, ids, pays, subs []string
	var firsts []bool
	for _, k := range slices.SortedFunc(maps.Keys(merged), func(a, b [2]string) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	}) {
		m := merged[k]
		providers, ids, pays, subs, firsts = append(providers, m.Provider), append(ids, m.Invoice), append(pays, m.Payment), append(subs, m.SubscriptionID), append(firsts, m.First)
	}
	rows, err := q.Query(ctx, `
		INSERT INTO subscription_invoice AS si (provider, invoice, payment, subscription_id, first)
		SELECT p, i, nullif(pay, ''), nullif(s, ''), CASE WHEN s <> '' THEN f END
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bool[]) WITH ORDINALITY AS u(p, i, pay, s, f, n) ORDER BY n
		ON CONFLICT (provider, invoice) DO UPDATE SET
			payment = coalesce(si.payment, EXCLUDED.payment),
			subscription_id = coalesce(si.subscription_id, EXCLUDED.subscription_id),
			first = CASE WHEN si.subscription_id IS NULL THEN EXCLUDED.first ELSE si.first END
		RETURNING provider, invoice, coalesce(payment, ''), coalesce(subscription_id, ''), coalesce(first, false)`,
		providers, ids, pays, subs, firsts)
	if err != nil {
		return nil, wrap("record subscription invoices", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[SubscriptionInvoice])
	return out, wrap("record subscription invoices", err)
}

// resolvePayments makes the stored refunds and disputes that name a
// subscription's payment (or invoice) name the purchase it paid for, as
// LinkSubscriptions says, holding the names first.
func resolvePayments(ctx context.Context, q DBTX, named []Payment, invoices []SubscriptionInvoice, linked []SubscriptionRef, res *LinkResult) error {
	var providers, ids []string
	for _, n := range named {
		providers, ids = append(providers, n.Provider), append(ids, n.PaymentID)
	}
	for _, in := range invoices {
		providers, ids = append(providers, in.Provider, in.Provider), append(ids, in.Invoice, in.Payment)
	}
	var linkedProviders, linkedSubs []string
	for _, l := range linked {
		linkedProviders, linkedSubs = append(linkedProviders, l.Provider), append(linkedSubs, l.SubscriptionID)
	}
	if len(providers) == 0 && len(linked) == 0 {
		return nil
	}
	rows, err := q.Query(ctx, `
		SELECT p, x FROM (
			SELECT DISTINCT p, x FROM (
				SELECT p, x FROM unnest($1::text[], $2::text[]) AS u(p, x)
				UNION ALL
				SELECT si.provider, n.x FROM unnest($3::text[], $4::text[]) AS l(p, s)
				JOIN subscription_invoice si ON si.provider = l.p AND si.subscription_id = l.s AND si.first
				CROSS JOIN LATERAL (VALUES (si.invoice), (si.payment)) AS n(x)
			) names WHERE x <> '' ORDER BY p, x
		) held WHERE pg_advisory_xact_lock(hashtextextended('guardian/link:' || p || ':' || x, 0)) IS NOT NULL`,
		providers, ids, linkedProviders, linkedSubs)
	if err != nil {
		return wrap("hold payments to resolve", err)
	}
	held, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Payment])
	if err != nil || len(held) == 0 {
		return wrap("hold payments to resolve", err)
	}
	providers, ids = paymentArrays(held)
	rows, err = q.Query(ctx, `
		WITH named AS (
			SELECT p, x FROM unnest($1::text[], $2::text[]) AS u(p, x)
		), target AS (
			SELECT named.p, named.x, CASE WHEN si.first THEN sub.payment_id ELSE si.invoice END AS t
			FROM named
			JOIN subscription_invoice si ON si.provider = named.p AND named.x IN (si.payment, si.invoice)
			LEFT JOIN subscription sub ON sub.provider = si.provider AND sub.subscription_id = si.subscription_id
			WHERE si.subscription_id IS NOT NULL
		), moved AS (
			UPDATE webhook_event e SET
				reverses = CASE WHEN e.reverses = target.x THEN target.t ELSE e.reverses END,
				refund_of = CASE WHEN e.refund_of = target.x THEN target.t ELSE e.refund_of END
			FROM target
			WHERE target.t <> target.x AND e.provider = target.p AND target.x IN (e.reverses, e.refund_of)
			RETURNING e.provider, target.t, e.reverses IS NOT DISTINCT FROM target.t AS reversed, e.refund_of IS NOT DISTINCT FROM target.t AS weigh
		)
		SELECT provider, t, bool_or(reversed), bool_or(weigh) FROM moved GROUP BY 1, 2 ORDER BY 1, 2`, providers, ids)
	if err != nil {
		return wrap("resolve subscription payments", err)
	}
	var p Payment
	var reversed, weigh bool
	_, err = pgx.ForEachRow(rows, []any{&p.Provider, &p.PaymentID, &reversed, &weigh}, func() error {
		if reversed {
			res.Reversed = append(res.Reversed, p)
		}
		if weigh {
			res.Weigh = append(res.Weigh, p)
		}
		return nil
	})
	return wrap("resolve subscription payments", err)
}

// LinkResult is what LinkSubscriptions did: the subscriptions it linked
// (starts seen for the first time), the purchases it made reversed, and
// those whose refunds it moved to them, to be weighed.
type LinkResult struct {
	Linked   []SubscriptionRef
	Reversed []Payment
	Weigh    []Payment
}

// Subscription is a subscription as Guardian knows it: linked to the
// purchase its start paid for, since the link was recorded, and ended
// since the first of its ends was stored (nil while it lives).
type Subscription struct {
	Provider, SubscriptionID, PaymentID string
	StartedAt                           time.Time
	EndedAt                             *time.Time
}

// SubscriptionStates are the states ListSubscriptions filters by.
var SubscriptionStates = []string{"active", "ended"}

// State is "ended" once an end is stored, else "active".
func (s Subscription) State() string {
	if s.EndedAt != nil {
		return "ended"
	}
	return "active"
}

const subscriptionSelect = `SELECT s.provider, s.subscription_id, s.payment_id, s.started_at,
		(SELECT min(e.first_seen_at) FROM webhook_event e WHERE e.provider = s.provider AND e.ends = s.subscription_id)
	FROM subscription s`

func scanSubscription(r pgx.CollectableRow) (Subscription, error) {
	var s Subscription
	err := r.Scan(&s.Provider, &s.SubscriptionID, &s.PaymentID, &s.StartedAt, &s.EndedAt)
	return s, err
}

// ListSubscriptions lists up to limit subscriptions, the most recently
// linked first, in a state ("active", "ended", or "" for both).
func ListSubscriptions(ctx context.Context, q DBTX, state string, limit int) ([]Subscription, error) {
	rows, err := q.Query(ctx, `SELECT * FROM (`+subscriptionSelect+`) s(provider, subscription_id, payment_id, started_at, ended_at)
		WHERE $1 = '' OR ($1 = 'ended') = (ended_at IS NOT NULL)
		ORDER BY started_at DESC, provider, subscription_id LIMIT $2`, state, limit)
	if err != nil {
		return nil, wrap("list subscriptions", err)
	}
	out, err := pgx.CollectRows(rows, scanSubscription)
	return out, wrap("list subscriptions", err)
}

// GetSubscription returns a subscription, or ErrNotFound when none is
// linked under that id.
func GetSubscription(ctx context.Context, q DBTX, provider, id string) (Subscription, error) {
	rows, err := q.Query(ctx, subscriptionSelect+` WHERE s.provider = $1 AND s.subscription_id = $2`, provider, id)
	if err != nil {
		return Subscription{}, wrap("get subscription", err)
	}
	s, err := pgx.CollectExactlyOneRow(rows, scanSubscription)
	if errors.Is(err, pgx.ErrNoRows) {
		return Subscription{}, ErrNotFound
	}
	return s, wrap("get subscription", err)
}

// SubscriptionEvents lists, oldest first, the stored events of a
// subscription: those of the purchase its start paid for, the refunds and
// disputes of it, and those that end it.
func SubscriptionEvents(ctx context.Context, q DBTX, s Subscription) ([]Event, error) {
	rows, err := q.Query(ctx, `SELECT `+eventColumns+` FROM webhook_event
		WHERE provider = $1 AND (payment_id = $2 OR reverses = $2 OR refund_of = $2 OR ends = $3)
		ORDER BY first_seen_at, id`, s.Provider, s.PaymentID, s.SubscriptionID)
	if err != nil {
		return nil, wrap("list subscription events", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) { return scanEvent(r) })
	return out, wrap("list subscription events", err)
}

// CountEndsAwaitingStart counts the stored ends of subscriptions Guardian
// has no link for: their start has not come (or came before this version
// recorded links), and they take nothing back until it does.
func CountEndsAwaitingStart(ctx context.Context, q DBTX) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT count(*) FROM webhook_event e WHERE e.ends IS NOT NULL
		AND NOT EXISTS (SELECT 1 FROM subscription s WHERE s.provider = e.provider AND s.subscription_id = e.ends)`).Scan(&n)
	return n, wrap("count ends awaiting their start", err)
}

// EventsToLink lists, up to limit, in id order after afterID, the stored
// events first seen in [since, until) whose body is kept and whose
// purchase (if they name one) has no subscription linked to it: those a
// link of subscriptions started before links were recorded reads.
func EventsToLink(ctx context.Context, q DBTX, since, until time.Time, afterID int64, limit int) ([]Event, error) {
	rows, err := q.Query(ctx, `SELECT `+eventColumns+` FROM webhook_event e
		WHERE e.first_seen_at >= $1 AND e.first_seen_at < $2 AND e.id > $3 AND e.pruned_at IS NULL
		  AND (e.payment_id IS NULL OR NOT EXISTS (
			SELECT 1 FROM subscription s WHERE s.provider = e.provider AND s.payment_id = e.payment_id))
		ORDER BY e.id LIMIT $4`, since, until, afterID, limit)
	if err != nil {
		return nil, wrap("list events to link", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) { return scanEvent(r) })
	return out, wrap("list events to link", err)
}
