package db

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Fulfilment is one payment's external action and where it stands.
type Fulfilment struct {
	ID           string     `json:"id"`
	EventPK      int64      `json:"event_pk"`
	Provider     string     `json:"provider"`
	PaymentID    string     `json:"payment_id"`
	State        string     `json:"state"`
	Attempt      int        `json:"attempt"`
	CreatedAt    time.Time  `json:"created_at"`
	UpdatedAt    time.Time  `json:"updated_at"`
	DispatchedAt *time.Time `json:"dispatched_at,omitempty"`
	// Checks counts the reconciler's lookups since the row was last parked;
	// NextCheckAt is when the next is due (nil: once the grace has passed).
	Checks      int        `json:"checks"`
	NextCheckAt *time.Time `json:"next_check_at,omitempty"`
}

const fulfilmentColumns = `id, event_pk, provider, payment_id, state, attempt, created_at, updated_at, dispatched_at, checks, next_check_at`

func scanFulfilment(row pgx.Row) (Fulfilment, error) {
	var f Fulfilment
	err := row.Scan(&f.ID, &f.EventPK, &f.Provider, &f.PaymentID, &f.State, &f.Attempt, &f.CreatedAt, &f.UpdatedAt, &f.DispatchedAt, &f.Checks, &f.NextCheckAt)
	return f, err
}

// InsertFulfilment records a pending fulfilment for a newly stored event,
// with its first transition. When the payment already has a live fulfilment
// (any state but failed or cancelled) nothing is written and inserted is
// false: invariant 1, enforced by the fulfilment_one_per_payment index.
func InsertFulfilment(ctx context.Context, q DBTX, eventPK int64, provider, paymentID, actor, reason string) (id string, inserted bool, err error) {
	err = q.QueryRow(ctx, `
		WITH created AS (
			INSERT INTO fulfilment (event_pk, provider, payment_id)
			VALUES ($1, $2, $3)
			ON CONFLICT DO NOTHING
			RETURNING id
		), logged AS (
			INSERT INTO fulfilment_transition (fulfilment_id, from_state, to_state, attempt, actor, reason)
			SELECT id, NULL, 'pending', 0, $4, $5 FROM created
		)
		SELECT id FROM created`,
		eventPK, provider, paymentID, actor, reason,
	).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, wrap("insert fulfilment", err)
	}
	return id, true, nil
}

// GetFulfilment returns one fulfilment by id.
func GetFulfilment(ctx context.Context, q DBTX, id string) (Fulfilment, error) {
	f, err := scanFulfilment(q.QueryRow(ctx, `SELECT `+fulfilmentColumns+` FROM fulfilment WHERE id = $1`, id))
	return f, wrap("get fulfilment", err)
}

// FulfilmentsByPayment returns every fulfilment of one payment, oldest first.
func FulfilmentsByPayment(ctx context.Context, q DBTX, provider, paymentID string) ([]Fulfilment, error) {
	rows, err := q.Query(ctx, `SELECT `+fulfilmentColumns+` FROM fulfilment WHERE provider = $1 AND payment_id = $2 ORDER BY created_at, id`, provider, paymentID)
	if err != nil {
		return nil, wrap("list fulfilments by payment", err)
	}
	fs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Fulfilment, error) { return scanFulfilment(r) })
	return fs, wrap("list fulfilments by payment", err)
}

// CountByState returns how many fulfilments are in each state.
func CountByState(ctx context.Context, q DBTX) (map[string]int, error) {
	rows, err := q.Query(ctx, `SELECT state, count(*) FROM fulfilment GROUP BY state`)
	if err != nil {
		return nil, wrap("count by state", err)
	}
	counts := map[string]int{}
	var st string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&st, &n}, func() error { counts[st] = n; return nil })
	return counts, wrap("count by state", err)
}

// DispatchInput is what the dispatcher hands the connector: the fulfilment
// and the event that created it.
type DispatchInput struct {
	Fulfilment
	EventID   string
	EventType string
	Payload   json.RawMessage
}
