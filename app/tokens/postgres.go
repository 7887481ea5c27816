package tokens

import (
	"context"
	"errors"
	"time"

	"github.com/guardian-pay/guardian/db"
)

// Postgres keeps tokens in the single_use_token table; a redeem is one
// DELETE ... RETURNING. It is the default store.
type Postgres struct {
	Store *db.Store
}

// Put stores the record.
func (p Postgres) Put(ctx context.Context, hash []byte, r Record) error {
	return db.PutToken(ctx, p.Store.Pool(), hash, r)
}

// Take deletes and returns the record.
func (p Postgres) Take(ctx context.Context, hash []byte) (Record, error) {
	r, err := db.TakeToken(ctx, p.Store.Pool(), hash)
	if errors.Is(err, db.ErrNotFound) {
		return Record{}, ErrGone
	}
	return r, err
}

// Prune deletes token records, and the consumption records that keep Redis
// stores honest, that expired before cutoff. Tokens in either store are
// pruned here: consumption records always live in Postgres.
func (p Postgres) Prune(ctx context.Context, cutoff time.Time) (int64, error) {
	return db.PruneTokens(ctx, p.Store.Pool(), cutoff)
}
