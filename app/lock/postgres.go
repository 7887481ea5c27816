package lock

import (
	"context"
	"errors"
	"time"

	"github.com/guardian-pay/guardian/db"
)

// Postgres keeps locks in the guardian_lock table; expiry is judged by the
// database's clock, the same for every process.
type Postgres struct {
	Store *db.Store
}

// Acquire takes the lock if it is free or expired. When the answer is lost
// (a connection cut after the commit), the acquisition may have landed
// with nobody to use or release it, stalling every holder until its TTL:
// the lease is released by its token before the error is returned.
func (p Postgres) Acquire(ctx context.Context, name string, ttl time.Duration) (Lease, error) {
	token := newToken()
	fence, err := db.AcquireLock(ctx, p.Store.Pool(), name, token, ttl)
	if errors.Is(err, db.ErrConflict) {
		return Lease{}, ErrHeld
	}
	if err != nil {
		_ = ReleaseSoon(ctx, p, Lease{Name: name, Token: token})
		return Lease{}, err
	}
	return Lease{Name: name, Token: token, Fence: fence}, nil
}

// Extend pushes the expiry out if the lease still holds the lock.
func (p Postgres) Extend(ctx context.Context, l Lease, ttl time.Duration) error {
	return lost(db.ExtendLock(ctx, p.Store.Pool(), l.Name, l.Token, ttl))
}

// Release deletes the lock if the lease still holds it.
func (p Postgres) Release(ctx context.Context, l Lease) error {
	return lost(db.ReleaseLock(ctx, p.Store.Pool(), l.Name, l.Token))
}

func lost(err error) error {
	if errors.Is(err, db.ErrConflict) {
		return ErrLost
	}
	return err
}
