package db

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// TransmissionRetention is how long a transmission's binding is kept:
// beyond PayPal's three days of retries.
const TransmissionRetention = 7 * 24 * time.Hour

// ErrRebound means a second body under one signed transmission id: the
// transmission is bound to the body first seen under it (migration 00033).
var ErrRebound = errors.New("another body was already delivered under this signed transmission id")

// BindTransmission binds a provider's signed transmission id to the
// SHA-256 of its body the first time it is seen, and returns ErrRebound if
// it was bound to another body. A retry of the same body passes.
func BindTransmission(ctx context.Context, q DBTX, provider, transmissionID string, bodySHA256 []byte) error {
	var bound []byte
	for range 2 {
		// A transmission bound by a transaction that committed after this
		// statement's snapshot is neither inserted nor read: the second
		// statement sees it.
		err := q.QueryRow(ctx, `
			WITH ins AS (
				INSERT INTO signed_transmission (provider, transmission_id, body_sha256) VALUES ($1, $2, $3)
				ON CONFLICT (provider, transmission_id) DO NOTHING
				RETURNING body_sha256)
			SELECT body_sha256 FROM ins
			UNION ALL SELECT body_sha256 FROM signed_transmission WHERE provider = $1 AND transmission_id = $2
			LIMIT 1`, provider, transmissionID, bodySHA256).Scan(&bound)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return wrap("bind transmission", err)
		}
		if !bytes.Equal(bound, bodySHA256) {
			return ErrRebound
		}
		return nil
	}
	return wrap("bind transmission", errors.New("the transmission was neither bound nor found"))
}

// PruneTransmissions deletes transmissions first seen before before, and
// returns how many.
func (s *Store) PruneTransmissions(ctx context.Context, before time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM signed_transmission WHERE seen_at < $1`, before)
	return tag.RowsAffected(), wrap("prune transmissions", err)
}
