package filter_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/filter"
	"github.com/guardian-pay/guardian/db/dbtest/redistest"
)

func TestRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("MarkThenCommitted", func(t *testing.T) {
		t.Parallel()
		rc, prefix := redistest.Client(t)
		f, err := filter.NewRedis(filter.RedisConfig{Client: rc, Prefix: prefix, Epoch: "e1", TTL: time.Hour})
		require.NoError(t, err)
		seen, err := f.Committed(ctx, "stripe", "evt_1")
		require.NoError(t, err)
		require.False(t, seen)
		require.NoError(t, f.MarkCommitted(ctx, "stripe", "evt_1"))
		seen, err = f.Committed(ctx, "stripe", "evt_1")
		require.NoError(t, err)
		require.True(t, seen)
		seen, err = f.Committed(ctx, "standard", "evt_1")
		require.NoError(t, err)
		require.False(t, seen, "marks are per provider")

		ttl, err := rc.TTL(ctx, prefix+"e1:stripe:evt_1").Result()
		require.NoError(t, err)
		require.InDelta(t, time.Hour.Seconds(), ttl.Seconds(), 5)
	})

	t.Run("MarksVouchForTheirEpochOnly", func(t *testing.T) {
		t.Parallel()
		// The same Redis and prefix: another database (a restore after
		// `guardian epoch rotate`, or a second deployment) must not see
		// the first one's marks.
		rc, prefix := redistest.Client(t)
		before, err := filter.NewRedis(filter.RedisConfig{Client: rc, Prefix: prefix, Epoch: "e1"})
		require.NoError(t, err)
		after, err := filter.NewRedis(filter.RedisConfig{Client: rc, Prefix: prefix, Epoch: "e2"})
		require.NoError(t, err)
		require.NoError(t, before.MarkCommitted(ctx, "stripe", "evt_1"))
		seen, err := after.Committed(ctx, "stripe", "evt_1")
		require.NoError(t, err)
		require.False(t, seen, "a mark from another epoch answered duplicate")
		_, err = filter.NewRedis(filter.RedisConfig{Client: rc, Prefix: prefix})
		require.Error(t, err, "an epoch is required")
	})

	t.Run("DownFailsFastAndStepsAside", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		// A server that accepts and never answers: a hanging Redis.
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { _ = c.Close() })
			}
		}()
		t.Cleanup(func() { _ = ln.Close() })
		rc, err := filter.NewRedisClient("redis://" + ln.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = rc.Close() })
		f, err := filter.NewRedis(filter.RedisConfig{Client: rc, Epoch: "e1", Backoff: time.Hour})
		require.NoError(t, err)

		start := time.Now()
		_, err = f.Committed(ctx, "stripe", "evt_1")
		require.Error(t, err)
		require.Less(t, time.Since(start), time.Second, "a hanging Redis is given up on quickly")
		_, err = f.Committed(ctx, "stripe", "evt_1")
		require.ErrorIs(t, err, filter.ErrPaused, "after an error the filter steps aside")
		require.ErrorIs(t, f.MarkCommitted(ctx, "stripe", "evt_1"), filter.ErrPaused)
	})

	// A caller that stops waiting before its pipeline answers leaves the
	// call to the pipeline's writer, which fills it in later: with the race
	// detector on (`just test` runs this package with -race), a caller
	// that wrote the call's error itself shows up here.
	t.Run("ACallerThatGivesUpLeavesTheCallToItsWriter", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		closed := make(chan struct{})
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			_, _ = io.Copy(io.Discard, c) // never answers; returns when the client hangs up
			close(closed)
		}()
		t.Cleanup(func() { _ = ln.Close() })
		rc, err := filter.NewRedisClient("redis://" + ln.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = rc.Close() })
		// The pipeline's writer has seconds to dial and then waits out the
		// client's read timeout; the caller gives up after 5 ms. (With one
		// short timeout for both, a loaded machine could expire the
		// writer's batch before it dialled, and the hanging Redis would
		// never see a connection to drop.)
		f, err := filter.NewRedis(filter.RedisConfig{Client: rc, Epoch: "e1", Timeout: 5 * time.Second})
		require.NoError(t, err)
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
		defer cancel()
		_, err = f.Committed(callCtx, "stripe", "evt_1")
		// The caller's deadline, or, when the writer's read timed out
		// first (a stalled caller), the call's own timeout: a timeout
		// either way, never an answer.
		var ne net.Error
		require.True(t, errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()), "want a timeout, got %v", err)
		select {
		case <-closed: // the writer's read timed out: it is filling in the call now
		case <-time.After(5 * time.Second):
			t.Fatal("the pipeline never gave up on the hanging Redis")
		}
	})
}
