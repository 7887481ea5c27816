package db

import (
	"context"

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
// It returns those purchases, for the caller to take back in the same
// transaction.
//
// The subscriptions named (starts' and ends' alike) are held for the rest
// of the transaction, by an advisory lock each, taken in one order: a
// start and an end of one subscription recorded at once are serialized,
// so the second, whichever it is, sees the first and the end is never
// left unresolved. A start recorded with its end already stored makes the
// purchase reversed before its fulfilments are made (InsertFulfilments
// reads reverses): an end before the start grants nothing.
func LinkSubscriptions(ctx context.Context, q DBTX, starts []SubscriptionStart, ends []SubscriptionRef) ([]Payment, error) {
	if len(starts) == 0 && len(ends) == 0 {
		return nil, nil
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
		return nil, wrap("hold subscriptions", err)
	}
	if _, err := q.Exec(ctx, `
		INSERT INTO subscription (provider, subscription_id, payment_id)
		SELECT DISTINCT ON (p, s) p, s, pay FROM unnest($1::text[], $2::text[], $3::text[]) AS u(p, s, pay)
		WHERE pay <> '' ORDER BY p, s
		ON CONFLICT (provider, subscription_id) DO NOTHING`, providers, subs, payments); err != nil {
		return nil, wrap("record subscriptions", err)
	}
	rows, err := q.Query(ctx, `
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
		return nil, wrap("resolve subscription ends", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Payment])
	return out, wrap("resolve subscription ends", err)
}
