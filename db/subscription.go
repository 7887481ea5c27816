package db

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
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
	Starts    []SubscriptionStart
	Ends      []SubscriptionRef
	Invoices  []SubscriptionInvoice
	Named     []Payment
	Standings []SubscriptionStanding
}

func (l Links) empty() bool {
	return len(l.Starts) == 0 && len(l.Ends) == 0 && len(l.Invoices) == 0 && len(l.Named) == 0 && len(l.Standings) == 0
}

// SubscriptionStanding is a stored event's word on a subscription's
// standing: a suspension (its event names the subscription in suspends),
// or that it is active (Resume; resumes names it), at the provider's
// signed time (zero: none signed, taken in the order recorded).
type SubscriptionStanding struct {
	Provider, SubscriptionID string
	EventPK                  int64
	Resume                   bool
	At                       time.Time
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
	for _, st := range l.Standings {
		providers, subs, payments = append(providers, st.Provider), append(subs, st.SubscriptionID), append(payments, "")
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
	if err := resolveSuspensions(ctx, q, res.Linked, &res); err != nil {
		return res, err
	}
	for _, st := range sortStandings(l.Standings) {
		if err := applyStanding(ctx, q, st, &res); err != nil {
			return res, err
		}
	}
	return res, resolvePayments(ctx, q, l.Named, invoices, res.Linked, &res)
}

// resolveSuspensions makes the suspension in force of each subscription
// linked now, if it takes something back, reverse the start's purchase:
// its rows are then born taken back, as under an end before the start.
func resolveSuspensions(ctx context.Context, q DBTX, linked []SubscriptionRef, res *LinkResult) error {
	if len(linked) == 0 {
		return nil
	}
	var providers, subs []string
	for _, l := range linked {
		providers, subs = append(providers, l.Provider), append(subs, l.SubscriptionID)
	}
	rows, err := q.Query(ctx, `
		UPDATE webhook_event e SET reverses = sub.payment_id
		FROM unnest($1::text[], $2::text[]) AS l(p, s)
		JOIN subscription_standing st ON st.provider = l.p AND st.subscription_id = l.s
		JOIN subscription sub ON sub.provider = l.p AND sub.subscription_id = l.s
		WHERE e.id = st.suspended_by AND e.reverses IS NULL AND e.revokes IS NOT NULL
		RETURNING e.provider, e.reverses`, providers, subs)
	if err != nil {
		return wrap("resolve suspensions", err)
	}
	reversed, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Payment])
	res.Reversed = append(res.Reversed, reversed...)
	return wrap("resolve suspensions", err)
}

// sortStandings orders standings as they are applied: per subscription,
// by the provider's time, then as recorded.
func sortStandings(standings []SubscriptionStanding) []SubscriptionStanding {
	out := slices.Clone(standings)
	slices.SortFunc(out, func(a, b SubscriptionStanding) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.SubscriptionID, b.SubscriptionID),
			a.At.Compare(b.At), cmp.Compare(a.EventPK, b.EventPK))
	})
	return out
}

// applyStanding applies one suspension or resumption to its subscription's
// standing, under the subscription's lock (LinkSubscriptions holds it):
//   - one older than the latest applied (by the provider's time) is
//     stored and changes nothing, so the later word decides in any order;
//   - a suspension while none is in force is in force; once the
//     subscription is linked and has not ended it reverses the grant in
//     force (the start's purchase, or its latest grant again) for the
//     actions its policy names (revokes); a second suspension changes
//     nothing;
//   - a resumption ends the suspension in force; where that took
//     something back and the subscription has not ended, it pays for the
//     grant again of those actions: a purchase of its own, '<start>~<n>',
//     whose root is the start's, and whose rows the caller makes
//     (Regrants). A resumption with none in force (a reactivation before
//     the end, the first activation) changes nothing.
func applyStanding(ctx context.Context, q DBTX, st SubscriptionStanding, res *LinkResult) error {
	var at *time.Time
	if !st.At.IsZero() {
		at = &st.At
	}
	var suspendedBy *int64
	var grants int
	var payment *string
	var ended, stale bool
	err := q.QueryRow(ctx, `
		WITH held AS (
			INSERT INTO subscription_standing AS s (provider, subscription_id, standing_at) VALUES ($1, $2, $3)
			ON CONFLICT (provider, subscription_id) DO UPDATE SET standing_at = greatest(s.standing_at, EXCLUDED.standing_at)
			RETURNING (SELECT o.standing_at FROM subscription_standing o WHERE o.provider = $1 AND o.subscription_id = $2) AS before,
				suspended_by
		)
		SELECT coalesce($3 < held.before, false), held.suspended_by,
			(SELECT count(*) FROM subscription s JOIN purchase g ON g.provider = s.provider AND g.root = s.payment_id
			 WHERE s.provider = $1 AND s.subscription_id = $2)::int,
			(SELECT payment_id FROM subscription WHERE provider = $1 AND subscription_id = $2),
			EXISTS (SELECT 1 FROM webhook_event WHERE provider = $1 AND ends = $2)
		FROM held`, st.Provider, st.SubscriptionID, at).Scan(&stale, &suspendedBy, &grants, &payment, &ended)
	if err != nil || stale {
		return wrap("read subscription standing", err)
	}
	live := payment != nil && !ended
	switch {
	case !st.Resume && suspendedBy == nil:
		if _, err := q.Exec(ctx, `UPDATE subscription_standing SET suspended_by = $3 WHERE provider = $1 AND subscription_id = $2`,
			st.Provider, st.SubscriptionID, st.EventPK); err != nil || !live {
			return wrap("suspend subscription", err)
		}
		var reversed []Payment
		rows, err := q.Query(ctx, `UPDATE webhook_event SET reverses = $2 WHERE id = $1 AND revokes IS NOT NULL RETURNING provider, reverses`,
			st.EventPK, grantOf(*payment, grants))
		if err == nil {
			reversed, err = pgx.CollectRows(rows, pgx.RowToStructByPos[Payment])
		}
		res.Reversed = append(res.Reversed, reversed...)
		return wrap("suspend subscription", err)
	case st.Resume && suspendedBy != nil:
		var regrant string
		if live {
			regrant = grantOf(*payment, grants+1)
		}
		rows, err := q.Query(ctx, `
			WITH again AS (
				INSERT INTO purchase (provider, payment_id, actions, routes, detail, root)
				SELECT p.provider, $5, array(SELECT a FROM unnest(p.actions) a WHERE a = ANY(s.revokes) ORDER BY a), p.routes, p.detail, p.payment_id
				FROM webhook_event s JOIN purchase p ON p.provider = s.provider AND p.payment_id = $6
				WHERE $5 <> '' AND s.id = $3 AND s.reverses IS NOT NULL AND p.actions && s.revokes
				RETURNING payment_id
			), lifted AS (
				UPDATE subscription_standing SET suspended_by = NULL WHERE provider = $1 AND subscription_id = $2
			)
			UPDATE webhook_event SET payment_id = (SELECT payment_id FROM again) WHERE id = $4 AND EXISTS (SELECT 1 FROM again)
			RETURNING id`, st.Provider, st.SubscriptionID, *suspendedBy, st.EventPK, regrant, ptrOr(payment))
		if err != nil {
			return wrap("resume subscription", err)
		}
		again, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		res.Regrants = append(res.Regrants, again...)
		return wrap("resume subscription", err)
	}
	return nil
}

// WithGrants returns payments with, after them, the grants again of each
// (the purchases whose root it is). Nil stays nil: every payment.
func WithGrants(ctx context.Context, q DBTX, payments []Payment) ([]Payment, error) {
	if len(payments) == 0 {
		return payments, nil
	}
	providers, ids := paymentArrays(payments)
	rows, err := q.Query(ctx, `SELECT g.provider, g.payment_id FROM unnest($1::text[], $2::text[]) AS u(p, pay)
		JOIN purchase g ON g.provider = u.p AND g.root = u.pay ORDER BY 1, 2`, providers, ids)
	if err != nil {
		return nil, wrap("read grants again", err)
	}
	grants, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Payment])
	return slices.Concat(payments, grants), wrap("read grants again", err)
}

// grantOf names a subscription's grant: its start's purchase, or its nth
// grant again after a suspension.
func grantOf(start string, n int) string {
	if n == 0 {
		return start
	}
	return start + "~" + strconv.Itoa(n)
}

func ptrOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
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
	// Regrants are the resumptions that now pay for a grant again: their
	// events' rows are the caller's to make, in the same transaction.
	Regrants []int64
}

// Subscription is a subscription as Guardian knows it: linked to the
// purchase its start paid for, since the link was recorded, and ended
// since the first of its ends was stored (nil while it lives).
type Subscription struct {
	Provider, SubscriptionID, PaymentID string
	StartedAt                           time.Time
	EndedAt                             *time.Time
	// Suspended says a suspension is in force (past due or paused);
	// Grants counts its grants again after suspensions.
	Suspended bool
	Grants    int
}

// SubscriptionStates are the states ListSubscriptions filters by.
var SubscriptionStates = []string{"active", "suspended", "ended"}

// State is "ended" once an end is stored, else "suspended" while a
// suspension is in force, else "active".
func (s Subscription) State() string {
	switch {
	case s.EndedAt != nil:
		return "ended"
	case s.Suspended:
		return "suspended"
	}
	return "active"
}

// GrantIDs names the purchases of the subscription's grants: its start's,
// then each grant again.
func (s Subscription) GrantIDs() []string {
	ids := []string{s.PaymentID}
	for n := 1; n <= s.Grants; n++ {
		ids = append(ids, grantOf(s.PaymentID, n))
	}
	return ids
}

const subscriptionSelect = `SELECT s.provider, s.subscription_id, s.payment_id, s.started_at,
		(SELECT min(e.first_seen_at) FROM webhook_event e WHERE e.provider = s.provider AND e.ends = s.subscription_id),
		coalesce(st.suspended_by IS NOT NULL, false),
		(SELECT count(*) FROM purchase g WHERE g.provider = s.provider AND g.root = s.payment_id)::int
	FROM subscription s LEFT JOIN subscription_standing st USING (provider, subscription_id)`

func scanSubscription(r pgx.CollectableRow) (Subscription, error) {
	var s Subscription
	err := r.Scan(&s.Provider, &s.SubscriptionID, &s.PaymentID, &s.StartedAt, &s.EndedAt, &s.Suspended, &s.Grants)
	return s, err
}

// ListSubscriptions lists up to limit subscriptions, the most recently
// linked first, in a state ("active", "ended", or "" for both).
func ListSubscriptions(ctx context.Context, q DBTX, state string, limit int) ([]Subscription, error) {
	rows, err := q.Query(ctx, `SELECT * FROM (`+subscriptionSelect+`) s(provider, subscription_id, payment_id, started_at, ended_at, suspended, grants)
		WHERE $1 = '' OR $1 = CASE WHEN ended_at IS NOT NULL THEN 'ended' WHEN suspended THEN 'suspended' ELSE 'active' END
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
// subscription: those of the purchase its start paid for, of its grants
// again and of its renewals, the refunds and disputes of them, and those
// that end, suspend or resume it.
func SubscriptionEvents(ctx context.Context, q DBTX, s Subscription) ([]Event, error) {
	rows, err := q.Query(ctx, `
		WITH purchases AS (
			SELECT unnest($2::text[]) AS id
			UNION SELECT invoice FROM subscription_invoice WHERE provider = $1 AND subscription_id = $3
		)
		-- Each way an event names the subscription through its own index:
		-- as one condition of ORs over subqueries, it read the whole table.
		SELECT `+eventColumns+` FROM webhook_event WHERE id IN (
			SELECT e.id FROM purchases p JOIN webhook_event e ON e.provider = $1 AND e.payment_id = p.id
			UNION SELECT e.id FROM purchases p JOIN webhook_event e ON e.provider = $1 AND e.reverses = p.id
			UNION SELECT e.id FROM purchases p JOIN webhook_event e ON e.provider = $1 AND e.refund_of = p.id
			UNION SELECT e.id FROM webhook_event e WHERE e.provider = $1 AND e.ends = $3
			UNION SELECT e.id FROM webhook_event e WHERE e.provider = $1 AND e.suspends = $3
			UNION SELECT e.id FROM webhook_event e WHERE e.provider = $1 AND e.resumes = $3)
		ORDER BY first_seen_at, id`, s.Provider, s.GrantIDs(), s.SubscriptionID)
	if err != nil {
		return nil, wrap("list subscription events", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) { return scanEvent(r) })
	return out, wrap("list subscription events", err)
}

// SubscriptionRenewals lists, in the order recorded, the purchases of a
// subscription's payments after its first (its renewals: Stripe's and
// Lemon Squeezy's invoices, Paddle's transactions, PayPal's sales), as
// their events state them. A renewal fulfils where renewals are routed.
func SubscriptionRenewals(ctx context.Context, q DBTX, s Subscription) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT invoice FROM subscription_invoice
		WHERE provider = $1 AND subscription_id = $2 AND NOT first ORDER BY recorded_at, invoice`, s.Provider, s.SubscriptionID)
	if err != nil {
		return nil, wrap("list subscription renewals", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if out == nil {
		out = []string{}
	}
	return out, wrap("list subscription renewals", err)
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
