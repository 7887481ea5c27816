package db

import (
	"context"
	"encoding/json"
	"time"
)

// TokenRecord is what a single-use token is bound to.
type TokenRecord struct {
	Purpose   string          `json:"purpose"`
	Payload   json.RawMessage `json:"payload"`
	ExpiresAt time.Time       `json:"expires_at"`
}

// PutToken stores a token's record under its hash.
func PutToken(ctx context.Context, q DBTX, hash []byte, r TokenRecord) error {
	_, err := q.Exec(ctx, `INSERT INTO single_use_token (hash, purpose, payload, expires_at) VALUES ($1, $2, $3, $4)`,
		hash, r.Purpose, string(r.Payload), r.ExpiresAt)
	return wrap("put token", err)
}

// TakeToken deletes a token and returns its record, in one statement: of
// any number of concurrent takers exactly one gets the row. ErrNotFound
// means no such token (never issued, or already taken).
func TakeToken(ctx context.Context, q DBTX, hash []byte) (TokenRecord, error) {
	var r TokenRecord
	var payload []byte
	err := q.QueryRow(ctx, `DELETE FROM single_use_token WHERE hash = $1 RETURNING purpose, payload, expires_at`, hash).
		Scan(&r.Purpose, &payload, &r.ExpiresAt)
	r.Payload = payload
	return r, wrap("take token", err)
}

// RecordConsumption durably records that a token was consumed. It returns
// ErrConflict if it was recorded before: the token is spent, whatever a
// forgetful store says.
func RecordConsumption(ctx context.Context, q DBTX, hash []byte, expiresAt time.Time) error {
	tag, err := q.Exec(ctx, `INSERT INTO token_consumption (hash, expires_at) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING`, hash, expiresAt)
	if err != nil {
		return wrap("record token consumption", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrConflict
	}
	return nil
}

// PruneTokens deletes tokens and consumption records that expired before
// cutoff. A consumption record must outlive its token's expiry: until then a
// restored copy of the token would still be redeemable.
func PruneTokens(ctx context.Context, q DBTX, cutoff time.Time) (int64, error) {
	a, err := q.Exec(ctx, `DELETE FROM single_use_token WHERE expires_at < $1`, cutoff)
	if err != nil {
		return 0, wrap("prune tokens", err)
	}
	b, err := q.Exec(ctx, `DELETE FROM token_consumption WHERE expires_at < $1`, cutoff)
	if err != nil {
		return 0, wrap("prune token consumption", err)
	}
	return a.RowsAffected() + b.RowsAffected(), nil
}
