package db

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// Event is one stored webhook event.
type Event struct {
	ID        int64
	Provider  string
	EventID   string
	Type      string
	PaymentID string
	// Unmapped says why an event that says it is paid names no payment
	// Guardian can read; empty for every other event.
	Unmapped string
	// DeliveryID is the first delivery's own id where the provider sends
	// one beside the event's (Shopify); empty otherwise.
	DeliveryID string
	// Reversal describes a refund or dispute ("full refund", "dispute
	// lost"); Reverses is the payment it takes back under the policy at
	// intake. Both empty for every other event.
	Reversal, Reverses string
	// Payload is the body exactly as the provider signed it; empty once
	// pruned (PrunedAt) after the payload retention.
	Payload     json.RawMessage
	PrunedAt    *time.Time
	Deliveries  int
	FirstSeenAt time.Time
	LastSeenAt  time.Time
}

// EventParams is a verified event about to be stored.
type EventParams struct {
	Provider  string
	EventID   string
	Type      string
	PaymentID string // empty when the event does not fulfil
	Payload   []byte // the exact signed bytes
	Origin    string // "webhook" (the default) or "backfill"
	Unmapped  string // why a paid event names no readable payment; "" for the rest
	// DeliveryID is the delivery's own id beside the event's, where the
	// provider sends one (Shopify's X-Shopify-Webhook-Id).
	DeliveryID string
	// Reversal describes a refund or dispute; Reverses is the payment the
	// policy takes back for it. Empty for every other event.
	Reversal, Reverses string
	// Revokes names the actions the reversal takes back (their take-back
	// policies, at the node that records it); set with Reverses, or with
	// Ends before the subscription's purchase is known.
	Revokes []string
	// Ends names the subscription an event ends (provider.End); its
	// Reverses is set once the purchase the subscription's start paid for
	// is known (LinkSubscriptions).
	Ends string
	// Suspends names the subscription an event suspends (provider.
	// Suspension), resolved like Ends to the grant it takes back;
	// Resumes one it says is active again (provider.Event.Resumes).
	Suspends, Resumes string
	// Amount is what a paying event says was paid, or what a refund
	// returned; nil where the event does not say (migration 00032).
	Amount *Amount
	// RefundOf is the payment of a refund whose share of it is not yet
	// decided: its refunds are weighed against the payment's Amount
	// (RefundShares). RefundID names the refund; RefundCumulative says
	// Amount is the payment's refunded total so far.
	RefundOf, RefundID string
	RefundCumulative   bool
}

// Amount is an amount in its currency's minor units, as a provider's
// signed fields state it.
type Amount struct {
	Minor    int64
	Currency string
}

const eventColumns = `id, provider, event_id, event_type, coalesce(payment_id, ''), coalesce(unmapped, ''), coalesce(delivery_id, ''), coalesce(reversal, ''), coalesce(reverses, ''), body, pruned_at, deliveries, first_seen_at, last_seen_at`

// scanEvent scans eventColumns, then into extra the columns a statement
// selects after them.
func scanEvent(row pgx.Row, extra ...any) (Event, error) {
	var e Event
	var payload []byte
	err := row.Scan(append([]any{&e.ID, &e.Provider, &e.EventID, &e.Type, &e.PaymentID, &e.Unmapped, &e.DeliveryID, &e.Reversal, &e.Reverses,
		&payload, &e.PrunedAt, &e.Deliveries, &e.FirstSeenAt, &e.LastSeenAt}, extra...)...)
	e.Payload = payload
	return e, err
}

// GetEvent returns the event stored under (provider, event_id).
func GetEvent(ctx context.Context, q DBTX, provider, eventID string) (Event, error) {
	e, err := scanEvent(q.QueryRow(ctx, `SELECT `+eventColumns+` FROM webhook_event WHERE provider = $1 AND event_id = $2`, provider, eventID))
	return e, wrap("get event", err)
}

// EventListParams filters and pages an event listing. Zero fields do not
// filter.
type EventListParams struct {
	Provider string
	Type     string
	// PaymentPrefix and EventPrefix find ids that start with them.
	PaymentPrefix, EventPrefix string
	// Since and Until bound first_seen_at: Since <= first_seen_at < Until.
	Since, Until time.Time
	// Limit caps the page; defaults to 50, at most 500.
	Limit int
	// Cursor continues a previous listing (its next cursor).
	Cursor string
	// Unmapped keeps only events flagged as paid but naming no payment
	// Guardian can read.
	Unmapped bool
}

// ListEvents returns events newest first, without their payloads (a page
// of bodies could be hundreds of megabytes), and a cursor for the next page
// when there may be one.
func ListEvents(ctx context.Context, q DBTX, p EventListParams) ([]Event, string, error) {
	limit := pageLimit(p.Limit)
	var before int64
	if p.Cursor != "" {
		var err error
		if before, err = decodeIDCursor(p.Cursor); err != nil {
			return nil, "", err
		}
	}
	rows, err := q.Query(ctx, `
		SELECT id, provider, event_id, event_type, coalesce(payment_id, ''), coalesce(unmapped, ''), deliveries, first_seen_at, last_seen_at
		FROM webhook_event e
		WHERE ($1 = '' OR e.provider = $1)
		  AND ($2 = '' OR e.event_type = $2)
		  AND ($3 = '' OR (`+prefixMatch("e.payment_id", "$3")+`))
		  AND ($4 = '' OR (`+prefixMatch("e.event_id", "$4")+`))
		  AND ($5::timestamptz IS NULL OR e.first_seen_at >= $5)
		  AND ($6::timestamptz IS NULL OR e.first_seen_at < $6)
		  AND ($7 = 0 OR e.id < $7)
		  AND (NOT $9 OR e.unmapped IS NOT NULL)
		ORDER BY e.id DESC
		LIMIT $8`,
		p.Provider, p.Type, p.PaymentPrefix, p.EventPrefix, nullTime(p.Since), nullTime(p.Until), before, limit+1, p.Unmapped)
	if err != nil {
		return nil, "", wrap("list events", err)
	}
	es, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var e Event
		err := r.Scan(&e.ID, &e.Provider, &e.EventID, &e.Type, &e.PaymentID, &e.Unmapped, &e.Deliveries, &e.FirstSeenAt, &e.LastSeenAt)
		return e, err
	})
	if err != nil {
		return nil, "", wrap("list events", err)
	}
	next := ""
	if len(es) > limit {
		es = es[:limit]
		next = encodeIDCursor(es[len(es)-1].ID)
	}
	return es, next, nil
}

// GetEventByPK returns the event stored under its row id.
func GetEventByPK(ctx context.Context, q DBTX, pk int64) (Event, error) {
	e, err := scanEvent(q.QueryRow(ctx, `SELECT `+eventColumns+` FROM webhook_event WHERE id = $1`, pk))
	return e, wrap("get event", err)
}

// CountUnmapped counts the events flagged as paid but naming no payment
// Guardian can read (through their partial index).
func CountUnmapped(ctx context.Context, q DBTX) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT count(*) FROM webhook_event WHERE unmapped IS NOT NULL`).Scan(&n)
	return n, wrap("count unmapped events", err)
}

// SetEventPayment records the payment a stored event names, found by a
// replay's new reading of its body, and clears its unmapped flag. Only an
// event stored without a payment changes: ErrConflict otherwise.
func SetEventPayment(ctx context.Context, q DBTX, pk int64, paymentID string) error {
	tag, err := q.Exec(ctx, `UPDATE webhook_event SET payment_id = $2, unmapped = NULL WHERE id = $1 AND payment_id IS NULL`, pk, paymentID)
	if err != nil {
		return wrap("set event payment", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrConflict
	}
	return nil
}
