package receiver

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema creates the table a Receiver keeps its keys in, in the merchant's
// database: one row per key that finished (done or declined), with a hash
// of the body it was sent with and the answer given, which every later
// request with the key gets again. A key whose handler failed leaves no
// row. It is idempotent; merchants with their own migration tool copy it.
const Schema = `
CREATE TABLE IF NOT EXISTS guardian_receiver_key (
    idempotency_key text        PRIMARY KEY,
    body_sha256     bytea       NOT NULL,
    status          text        NOT NULL CHECK (status IN ('done', 'declined')),
    answer          jsonb       NOT NULL,
    test            boolean     NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT now()
)`

// Migrate creates the receiver's table if it does not exist.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, Schema); err != nil {
		return fmt.Errorf("create guardian_receiver_key: %w", err)
	}
	return nil
}
