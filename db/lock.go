package db

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrStaleFence means a guarded write carried a fencing number older than
// one the resource already accepted: its holder lost the lock.
var ErrStaleFence = errors.New("stale fencing number: the lock has a newer holder")

// AcquireLock takes the named lock for token until ttl from now, if it is
// free or expired, and returns the new fencing number. ErrConflict means
// someone else holds it.
func AcquireLock(ctx context.Context, q DBTX, name, token string, ttl time.Duration) (int64, error) {
	var fence int64
	err := q.QueryRow(ctx, `
		INSERT INTO guardian_lock (name, token, fence, expires_at)
		VALUES ($1, $2, 1, now() + make_interval(secs => $3))
		ON CONFLICT (name) DO UPDATE SET token = excluded.token, fence = guardian_lock.fence + 1, expires_at = excluded.expires_at
		WHERE guardian_lock.expires_at <= now()
		RETURNING fence`, name, token, ttl.Seconds()).Scan(&fence)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrConflict
	}
	return fence, wrap("acquire lock", err)
}

// ExtendLock moves the lock's expiry to ttl from now if token still holds
// it and it has not expired. ErrConflict means the lock is lost.
func ExtendLock(ctx context.Context, q DBTX, name, token string, ttl time.Duration) error {
	tag, err := q.Exec(ctx, `UPDATE guardian_lock SET expires_at = now() + make_interval(secs => $3)
		WHERE name = $1 AND token = $2 AND expires_at > now()`, name, token, ttl.Seconds())
	if err != nil {
		return wrap("extend lock", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrConflict
	}
	return nil
}

// ReleaseLock frees the lock only if token holds it: compare, then free, in
// one statement. The row stays, expired and without a holder, so the next
// acquisition's fencing number continues from this one. ErrConflict means
// token no longer held it, and nothing changed.
func ReleaseLock(ctx context.Context, q DBTX, name, token string) error {
	tag, err := q.Exec(ctx, `UPDATE guardian_lock SET token = '', expires_at = '-infinity'
		WHERE name = $1 AND token = $2 AND token <> ''`, name, token)
	if err != nil {
		return wrap("release lock", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrConflict
	}
	return nil
}

// CheckFence admits a guarded write for fence on the named resource: it
// records fence as the highest seen and returns nil, or returns
// ErrStaleFence if a higher one was seen. Call it inside the guarded
// write's transaction, so the write and the check commit together.
func CheckFence(ctx context.Context, q DBTX, name string, fence int64) error {
	tag, err := q.Exec(ctx, `
		INSERT INTO lock_fence (name, fence) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET fence = excluded.fence WHERE lock_fence.fence <= excluded.fence`, name, fence)
	if err != nil {
		return wrap("check fence", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrStaleFence
	}
	return nil
}
