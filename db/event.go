package db

import (
	"context"
	"encoding/json"
	"errors"
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
	// Payload is the body exactly as the provider signed it.
	Payload     json.RawMessage
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
}

// InsertEvent stores a new event, or, when (provider, event_id) is already
// stored, counts one more delivery and writes nothing else. inserted tells
// which happened.
func InsertEvent(ctx context.Context, q DBTX, p EventParams) (id int64, inserted bool, err error) {
	err = q.QueryRow(ctx, `
		INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body, origin)
		VALUES ($1, $2, $3, NULLIF($4, ''), $5, coalesce(NULLIF($6, ''), 'webhook'))
		ON CONFLICT (provider, event_id) DO NOTHING
		RETURNING id`,
		p.Provider, p.EventID, p.Type, p.PaymentID, p.Payload, p.Origin,
	).Scan(&id)
	if err == nil {
		return id, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return 0, false, wrap("insert event", err)
	}
	err = q.QueryRow(ctx, `
		UPDATE webhook_event SET deliveries = deliveries + 1, last_seen_at = now()
		WHERE provider = $1 AND event_id = $2
		RETURNING id`,
		p.Provider, p.EventID,
	).Scan(&id)
	return id, false, wrap("count duplicate delivery", err)
}

const eventColumns = `id, provider, event_id, event_type, coalesce(payment_id, ''), body, deliveries, first_seen_at, last_seen_at`

func scanEvent(row pgx.Row) (Event, error) {
	var e Event
	var payload []byte
	err := row.Scan(&e.ID, &e.Provider, &e.EventID, &e.Type, &e.PaymentID, &payload, &e.Deliveries, &e.FirstSeenAt, &e.LastSeenAt)
	e.Payload = payload
	return e, err
}

// GetEvent returns the event stored under (provider, event_id).
func GetEvent(ctx context.Context, q DBTX, provider, eventID string) (Event, error) {
	e, err := scanEvent(q.QueryRow(ctx, `SELECT `+eventColumns+` FROM webhook_event WHERE provider = $1 AND event_id = $2`, provider, eventID))
	return e, wrap("get event", err)
}
