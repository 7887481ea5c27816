package jobs

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/guardian-pay/guardian/app/lock"
)

// leaseTTL is how long a periodic round's lock outlives its holder's last
// heartbeat. A holder killed mid-round stalls the next round by at most
// this; a live one extends the lease every third of it for as long as the
// round runs, which the job's own timeout bounds.
const leaseTTL = 15 * time.Second

// exclusive runs fn under the named lock, so periodic work never overlaps
// itself across processes. If another holder has the lock it does nothing
// and returns nil: the holder is doing the work.
//
// The lock is a lease of ttl, renewed while fn runs. A renewal that finds
// the lease lost (the holder stalled past ttl and another took over)
// cancels fn's context with lock.ErrLost; writes fn makes under the lease's
// fencing number are refused from then on regardless. The lock is released
// however fn ends.
func exclusive(ctx context.Context, locker lock.Locker, logger *slog.Logger, name string, ttl time.Duration, fn func(context.Context, lock.Lease) error) error {
	l, err := locker.Acquire(ctx, name, ttl)
	if errors.Is(err, lock.ErrHeld) {
		logger.DebugContext(ctx, "periodic work already running elsewhere", "lock", name)
		return nil
	}
	if err != nil {
		return err
	}
	defer func() {
		if err := lock.ReleaseSoon(ctx, locker, l); err != nil && !errors.Is(err, lock.ErrLost) {
			logger.WarnContext(ctx, "lock release", "lock", name, "error", err)
		}
	}()

	roundCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		renew(roundCtx, cancel, locker, logger, l, ttl)
	}()
	err = fn(roundCtx, l)
	cancel(nil)
	<-renewed
	return err
}

// renew extends l every third of ttl until ctx ends. A failed extension is
// tried again at the next beat, while the lease may still be live; one that
// finds the lease lost cancels the round.
func renew(ctx context.Context, cancel context.CancelCauseFunc, locker lock.Locker, logger *slog.Logger, l lock.Lease, ttl time.Duration) {
	beat := time.NewTicker(ttl / 3)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-beat.C:
		}
		ectx, cancelTry := context.WithTimeout(ctx, ttl/3)
		err := locker.Extend(ectx, l, ttl)
		cancelTry()
		switch {
		case errors.Is(err, lock.ErrLost):
			logger.WarnContext(ctx, "periodic work lost its lock; stopping the round", "lock", l.Name)
			cancel(lock.ErrLost)
			return
		case err != nil && ctx.Err() == nil:
			logger.WarnContext(ctx, "lock renewal failed; trying again", "lock", l.Name, "error", err)
		}
	}
}
