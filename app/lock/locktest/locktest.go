// Package locktest is the conformance suite every Locker must pass.
package locktest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/guardian-pay/guardian/app/lock"
	"github.com/guardian-pay/guardian/db"
)

// Harness is one Locker under test, with the Postgres database that holds
// the guarded resource.
type Harness struct {
	Locker lock.Locker
	Pool   *pgxpool.Pool
}

// guardedWrite is the write a lock protects: it commits only if fence is
// not older than one the resource already accepted. Its effect is the
// fence lock_fence keeps for name.
func guardedWrite(ctx context.Context, pool *pgxpool.Pool, name string, fence int64) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return db.CheckFence(ctx, tx, name, fence)
	})
}

// Run runs the suite.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	for _, c := range []struct {
		name string
		run  func(ctx context.Context, t *testing.T, newHarness func(t *testing.T) Harness)
	}{
		{"StaleHolderCannotReleaseOrWriteOverSuccessor", staleHolderCannotReleaseOrWriteOverSuccessor},
		{"OneOfManyAcquires", oneOfManyAcquires},
		{"FencesGrowAndReleaseFrees", fencesGrowAndReleaseFrees},
		{"ExtendKeepsIt", extendKeepsIt},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(context.Background(), t, newHarness) })
	}
}

// staleHolderCannotReleaseOrWriteOverSuccessor is the suite's case StaleHolderCannotReleaseOrWriteOverSuccessor.
func staleHolderCannotReleaseOrWriteOverSuccessor(ctx context.Context, t *testing.T, newHarness func(t *testing.T) Harness) {
	h := newHarness(t)
	const name, ttl = "sweep", 300 * time.Millisecond

	// Holder A takes the lock, then stalls (a GC pause, SIGSTOP) past its TTL.
	a, err := h.Locker.Acquire(ctx, name, ttl)
	must(t, err)
	resumeA := make(chan struct{})
	aDone := make(chan [2]error)
	go func() {
		<-resumeA
		aDone <- [2]error{h.Locker.Release(ctx, a), guardedWrite(ctx, h.Pool, name, a.Fence)}
	}()

	// B acquires once A's lock has expired, and writes under it.
	var b lock.Lease
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err = h.Locker.Acquire(ctx, name, time.Minute)
		if err == nil {
			break
		}
		if !errors.Is(err, lock.ErrHeld) || time.Now().After(deadline) {
			t.Fatalf("B never acquired after A's TTL: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // waiting out A's TTL is the scenario
	}
	if b.Fence <= a.Fence {
		t.Fatalf("B's fence %d is not above A's %d", b.Fence, a.Fence)
	}
	must(t, guardedWrite(ctx, h.Pool, name, b.Fence))

	// A resumes: both its release and its write must fail.
	close(resumeA)
	res := <-aDone
	if !errors.Is(res[0], lock.ErrLost) {
		t.Errorf("stale A's release: %v, want ErrLost", res[0])
	}
	if !errors.Is(res[1], db.ErrStaleFence) {
		t.Errorf("stale A's guarded write: %v, want ErrStaleFence", res[1])
	}
	// B's lock is intact: a third holder cannot take it, B can extend and release it.
	if _, err := h.Locker.Acquire(ctx, name, time.Minute); !errors.Is(err, lock.ErrHeld) {
		t.Errorf("C acquired B's lock after A's release: %v", err)
	}
	if err := h.Locker.Extend(ctx, b, time.Minute); err != nil {
		t.Errorf("B's extend: %v", err)
	}
	var accepted int64
	must(t, h.Pool.QueryRow(ctx, `SELECT fence FROM lock_fence WHERE name = $1`, name).Scan(&accepted))
	if accepted != b.Fence {
		t.Errorf("the resource holds fence %d, want B's %d", accepted, b.Fence)
	}
	must(t, h.Locker.Release(ctx, b))
}

// oneOfManyAcquires is the suite's case OneOfManyAcquires.
func oneOfManyAcquires(ctx context.Context, t *testing.T, newHarness func(t *testing.T) Harness) {
	h := newHarness(t)
	var wins atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 50 {
		wg.Go(func() {
			<-start
			if _, err := h.Locker.Acquire(ctx, "race", time.Minute); err == nil {
				wins.Add(1)
			} else if !errors.Is(err, lock.ErrHeld) {
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d holders at once", wins.Load())
	}
}

// fencesGrowAndReleaseFrees is the suite's case FencesGrowAndReleaseFrees.
func fencesGrowAndReleaseFrees(ctx context.Context, t *testing.T, newHarness func(t *testing.T) Harness) {
	h := newHarness(t)
	var last int64
	for range 3 {
		l, err := h.Locker.Acquire(ctx, "cycle", time.Minute)
		must(t, err)
		if l.Fence <= last {
			t.Fatalf("fence %d after %d", l.Fence, last)
		}
		last = l.Fence
		must(t, h.Locker.Release(ctx, l))
		if err := h.Locker.Release(ctx, l); !errors.Is(err, lock.ErrLost) {
			t.Fatalf("second release: %v, want ErrLost", err)
		}
	}
}

// extendKeepsIt is the suite's case ExtendKeepsIt.
func extendKeepsIt(ctx context.Context, t *testing.T, newHarness func(t *testing.T) Harness) {
	h := newHarness(t)
	l, err := h.Locker.Acquire(ctx, "long", 200*time.Millisecond)
	must(t, err)
	must(t, h.Locker.Extend(ctx, l, time.Minute))
	// Well past the first TTL, the lock is still held.
	deadline := time.Now().Add(400 * time.Millisecond)
	for time.Now().Before(deadline) {
		if _, err := h.Locker.Acquire(ctx, "long", time.Minute); !errors.Is(err, lock.ErrHeld) {
			t.Fatalf("extended lock was taken: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // sampling across the original TTL
	}
	must(t, h.Locker.Release(ctx, l))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
