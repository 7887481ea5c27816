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
	stored, err := InsertEvents(ctx, q, []BatchEvent{{EventParams: p, Deliveries: 1}})
	if err != nil {
		return 0, false, err
	}
	return stored[0].ID, stored[0].Inserted, nil
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
