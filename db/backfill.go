package db

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Checkpoint returns how far a provider's backfill has stored everything,
// and false when it never completed a run.
func Checkpoint(ctx context.Context, q DBTX, provider string) (time.Time, bool, error) {
	var at time.Time
	err := q.QueryRow(ctx, `SELECT stored_to FROM backfill_checkpoint WHERE provider = $1`, provider).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	return at, err == nil, wrap("read backfill checkpoint", err)
}

// AdvanceCheckpoint moves a provider's checkpoint to at, never back.
func AdvanceCheckpoint(ctx context.Context, q DBTX, provider string, at time.Time) error {
	_, err := q.Exec(ctx, `
		INSERT INTO backfill_checkpoint (provider, stored_to) VALUES ($1, $2)
		ON CONFLICT (provider) DO UPDATE SET stored_to = greatest(backfill_checkpoint.stored_to, excluded.stored_to), updated_at = now()`,
		provider, at)
	return wrap("advance backfill checkpoint", err)
}
