// Package lock is Guardian's own mutual exclusion, for work that must not
// overlap beyond what River's leader election gives. A lock is held by a
// random token until its TTL runs out; release and extension compare the
// token before they act, so a holder whose lock expired can never release or
// extend its successor's. Each acquisition hands out a fencing number, larger
// than any before, that the guarded write checks (db.CheckFence): a holder
// that stalled past its TTL finds its writes refused.
package lock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"time"
)

var (
	// ErrHeld means someone else holds the lock.
	ErrHeld = errors.New("lock is held by another holder")
	// ErrLost means the lease's token no longer holds the lock: it expired
	// and, perhaps, someone else acquired it. Nothing was changed.
	ErrLost = errors.New("lock lost: it expired or has a new holder")
)

// Lease is one holder's hold on a lock.
type Lease struct {
	Name  string
	Token string
	// Fence is this acquisition's fencing number.
	Fence int64
}

// Locker acquires, extends and releases named locks.
//
// Implementations must be safe for concurrent use across processes.
// Acquire returns ErrHeld when the lock is held and unexpired; Extend and
// Release act only if the lease's token still holds the lock, else return
// ErrLost and change nothing.
type Locker interface {
	Acquire(ctx context.Context, name string, ttl time.Duration) (Lease, error)
	Extend(ctx context.Context, l Lease, ttl time.Duration) error
	Release(ctx context.Context, l Lease) error
}

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// releaseBudget bounds ReleaseSoon: past it, the lock's TTL frees it anyway.
const releaseBudget = 10 * time.Second

// ReleaseSoon releases l, retrying with backoff on errors other than
// ErrLost: a release that fails on a dropped connection would otherwise
// leave the lock held until its TTL, stalling every holder after it. It
// ignores ctx's cancellation, so a holder stopping mid-work still
// releases, and gives up after 10 seconds; it waits between tries on that
// deadline, never blind.
func ReleaseSoon(ctx context.Context, locker Locker, l Lease) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseBudget)
	defer cancel()
	wait := 50 * time.Millisecond
	for {
		rctx, cancelTry := context.WithTimeout(ctx, 2*time.Second)
		err := locker.Release(rctx, l)
		cancelTry()
		if err == nil || errors.Is(err, ErrLost) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
			wait = min(2*wait, time.Second)
		}
	}
}
