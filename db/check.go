package db

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Check is one reconciliation lookup's answer.
type Check struct {
	ID           int64
	FulfilmentID string
	Attempt      int
	Actor        string
	Answer       string
	Evidence     json.RawMessage
	CreatedAt    time.Time
}

// DueForCheck returns parked fulfilments whose next lookup is due: parked
// for at least grace and past the parked claim's own deadline (so a call
// still in flight at the receiver can finish), and past their backoff,
// oldest first, of the actions named (nil: of every action).
func DueForCheck(ctx context.Context, q DBTX, grace time.Duration, limit int, actions []string) ([]Fulfilment, error) {
	rows, err := q.Query(ctx, `
		SELECT `+fulfilmentColumns+` FROM fulfilment
		WHERE state = 'needs_reconciliation' AND ($3::text[] IS NULL OR action_name = ANY($3))
		  AND updated_at <= now() - make_interval(secs => $1)
		  AND (deadline IS NULL OR deadline <= now())
		  AND (next_check_at IS NULL OR next_check_at <= now())
		ORDER BY updated_at, id
		LIMIT $2`, grace.Seconds(), limit, actions)
	if err != nil {
		return nil, wrap("due for check", err)
	}
	fs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Fulfilment, error) { return scanFulfilment(r) })
	return fs, wrap("due for check", err)
}

// RecordCheck logs a lookup's answer and schedules the next lookup after
// backoff, if, and only if, the fulfilment is still parked at the same
// attempt: an answer about a row that moved on is not recorded, and
// ErrConflict says so.
func RecordCheck(ctx context.Context, q DBTX, id string, attempt int, actor, answer string, evidence any, backoff time.Duration) error {
	ev, err := json.Marshal(evidence)
	if err != nil {
		return fmt.Errorf("marshal evidence: %w", err)
	}
	tag, err := q.Exec(ctx, `
		WITH bumped AS (
			UPDATE fulfilment_move SET checks = checks + 1, next_check_at = now() + make_interval(secs => $6)
			WHERE id = $1 AND state = 'needs_reconciliation' AND attempt = $2
			RETURNING id
		)
		INSERT INTO fulfilment_check (fulfilment_id, attempt, actor, answer, evidence)
		SELECT id, $2, $3, $4, $5 FROM bumped`,
		id, attempt, actor, answer, string(ev), backoff.Seconds())
	if err != nil {
		return wrap("record check", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrConflict
	}
	return nil
}

// Checks returns the lookups of one or more fulfilments in one query,
// oldest first.
func Checks(ctx context.Context, q DBTX, fulfilmentIDs ...string) ([]Check, error) {
	rows, err := q.Query(ctx, `
		SELECT id, fulfilment_id, attempt, actor, answer, evidence, created_at
		FROM fulfilment_check WHERE fulfilment_id = ANY($1::uuid[]) ORDER BY id`, fulfilmentIDs)
	if err != nil {
		return nil, wrap("list checks", err)
	}
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Check, error) {
		var c Check
		var ev []byte
		err := r.Scan(&c.ID, &c.FulfilmentID, &c.Attempt, &c.Actor, &c.Answer, &ev, &c.CreatedAt)
		c.Evidence = ev
		return c, err
	})
	return cs, wrap("list checks", err)
}
