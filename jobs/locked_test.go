package jobs

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/lock"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
)

// TestExclusive: a periodic round holds its lock for as long as it runs,
// however long that is, yet a holder killed mid-round leaves a lock that
// frees within the lease, not after the longest round.
func TestExclusive(t *testing.T) {
	t.Parallel()
	const ttl = 900 * time.Millisecond
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	setup := func(t *testing.T) (*dbtest.DB, lock.Locker) {
		d := dbtest.NewDB(t)
		return d, lock.Postgres{Store: db.New(d.Pool)}
	}
	expiresIn := func(t *testing.T, d *dbtest.DB, name string) time.Duration {
		var secs float64
		require.NoError(t, d.Pool.QueryRow(context.Background(),
			`SELECT extract(epoch FROM expires_at - now()) FROM guardian_lock WHERE name = $1`, name).Scan(&secs))
		return time.Duration(secs * float64(time.Second))
	}

	t.Run("ARoundLongerThanTheLeaseKeepsItsLock", func(t *testing.T) {
		t.Parallel()
		d, locker := setup(t)
		ctx := context.Background()
		rounds := 0
		err := exclusive(ctx, locker, quiet, "round", ttl, func(ctx context.Context, _ lock.Lease) error {
			rounds++
			for end := time.Now().Add(4 * ttl); time.Now().Before(end); time.Sleep(ttl / 4) {
				// Another process's round, now and then: it finds the lock
				// held, and does nothing.
				require.NoError(t, exclusive(ctx, locker, quiet, "round", ttl, func(context.Context, lock.Lease) error {
					rounds++
					return nil
				}))
				// What a kill -9 here would leave: a lock that frees
				// within one lease.
				require.LessOrEqual(t, expiresIn(t, d, "round"), ttl)
			}
			return ctx.Err()
		})
		require.NoError(t, err)
		require.Equal(t, 1, rounds, "the lock held for the whole round")
		// Released at the end: the next round runs at once.
		require.NoError(t, exclusive(ctx, locker, quiet, "round", ttl, func(context.Context, lock.Lease) error {
			rounds++
			return nil
		}))
		require.Equal(t, 2, rounds)
	})

	t.Run("ALostLeaseEndsTheRound", func(t *testing.T) {
		t.Parallel()
		d, locker := setup(t)
		ctx := context.Background()
		err := exclusive(ctx, locker, quiet, "round", ttl, func(ctx context.Context, _ lock.Lease) error {
			// The holder stalled past its lease and another took the lock.
			_, err := d.Pool.Exec(ctx, `UPDATE guardian_lock SET token = 'successor', fence = fence + 1 WHERE name = 'round'`)
			require.NoError(t, err)
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(5 * ttl):
				return errors.New("the round went on without its lock")
			}
		})
		require.ErrorIs(t, err, lock.ErrLost)
		var token string
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT token FROM guardian_lock WHERE name = 'round'`).Scan(&token))
		require.Equal(t, "successor", token, "the lost holder's release left its successor's lock alone")
	})

}
