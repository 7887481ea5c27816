package jobs

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/guardian-pay/guardian/app/lock"
)

// exclusive runs fn under the named lock, so periodic work never overlaps
// itself across processes. If another holder has the lock it does nothing
// and returns nil: the holder is doing the work. fn gets the lease for
// writes it must fence. The lock is released however fn ends.
func exclusive(ctx context.Context, locker lock.Locker, logger *slog.Logger, name string, ttl time.Duration, fn func(lock.Lease) error) error {
	l, err := locker.Acquire(ctx, name, ttl)
	if errors.Is(err, lock.ErrHeld) {
		logger.DebugContext(ctx, "periodic work already running elsewhere", "lock", name)
		return nil
	}
	if err != nil {
		return err
	}
	defer func() {
		if err := lock.ReleaseSoon(ctx, locker, l); err != nil {
			logger.WarnContext(ctx, "lock release", "lock", name, "error", err)
		}
	}()
	return fn(l)
}
