package db

import (
	"context"
	"errors"
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

// LinkSubscriptions records, in q's transaction, each start's link (the
// first recorded stays: a subscription starts once), then makes each
// stored end of a linked subscription that is not yet resolved, and takes
// something back (its revokes), reverse the purchase the start paid for.
// It returns the subscriptions it linked, and those purchases, for the
// caller to take back in the same transaction.
//
// The subscriptions named (starts' and ends' alike) are held for the rest
// of the transaction, by an advisory lock each, taken in one order: a
// start and an end of one subscription recorded at once are serialized,
// so the second, whichever it is, sees the first and the end is never
// left unresolved. A start recorded with its end already stored makes the
// purchase reversed before its fulfilments are made (InsertFulfilments
// reads reverses): an end before the start grants nothing.
func LinkSubscriptions(ctx context.Context, q DBTX, starts []SubscriptionStart, ends []SubscriptionRef) (LinkResult, error) {
	if len(starts) == 0 && len(ends) == 0 {
		return LinkResult{}, nil
	}
	var providers, subs, payments []string
	for _, s := range starts {
		providers, subs, payments = append(providers, s.Provider), append(subs, s.SubscriptionID), append(payments, s.PaymentID)
	}
	for _, e := range ends {
		providers, subs, payments = append(providers, e.Provider), append(subs, e.SubscriptionID), append(payments, "")
	}
	if _, err := q.Exec(ctx, `
		SELECT pg_advisory_xact_lock(k) FROM (
			SELECT DISTINCT hashtextextended('guardian/subscription:' || p || ':' || s, 0) AS k
			FROM unnest($1::text[], $2::text[]) AS u(p, s) ORDER BY k
		) held`, providers, subs); err != nil {
		return LinkResult{}, wrap("hold subscriptions", err)
	}
	rows, err := q.Query(ctx, `
		INSERT INTO subscription (provider, subscription_id, payment_id)
		SELECT DISTINCT ON (p, s) p, s, pay FROM unnest($1::text[], $2::text[], $3::text[]) AS u(p, s, pay)
		WHERE pay <> '' ORDER BY p, s
		ON CONFLICT (provider, subscription_id) DO NOTHING
		RETURNING provider, subscription_id`, providers, subs, payments)
	if err != nil {
		return LinkResult{}, wrap("record subscriptions", err)
	}
	var res LinkResult
	if res.Linked, err = pgx.CollectRows(rows, pgx.RowToStructByPos[SubscriptionRef]); err != nil {
		return LinkResult{}, wrap("record subscriptions", err)
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
		return LinkResult{}, wrap("resolve subscription ends", err)
	}
	res.Reversed, err = pgx.CollectRows(rows, pgx.RowToStructByPos[Payment])
	return res, wrap("resolve subscription ends", err)
}

// LinkResult is what LinkSubscriptions did: the subscriptions it linked
// (starts seen for the first time), and the purchases it made reversed.
type LinkResult struct {
	Linked   []SubscriptionRef
	Reversed []Payment
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
// subscription: those of the purchase its start paid for and those that
// end it.
func SubscriptionEvents(ctx context.Context, q DBTX, s Subscription) ([]Event, error) {
	rows, err := q.Query(ctx, `SELECT `+eventColumns+` FROM webhook_event
		WHERE provider = $1 AND (payment_id = $2 OR ends = $3) ORDER BY first_seen_at, id`, s.Provider, s.PaymentID, s.SubscriptionID)
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
