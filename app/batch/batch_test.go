package batch_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guardian-pay/guardian/app/batch"
)

type item struct{ batchSize int }

func TestGatherer(t *testing.T) {
	t.Parallel()

	t.Run("AloneIsABatchOfOneAtOnce", func(t *testing.T) {
		t.Parallel()
		g := &batch.Gatherer[*item]{MaxBatch: 10, MaxWriters: 2, Write: func(_ context.Context, b []*item) {
			for _, it := range b {
				it.batchSize = len(b)
			}
		}}
		it := &item{}
		select {
		case <-g.Submit(it):
		case <-time.After(time.Second):
			t.Fatal("a lone item waited")
		}
		if it.batchSize != 1 {
			t.Fatalf("batch of %d", it.batchSize)
		}
	})

	t.Run("ConcurrentItemsShareBatchesWithinTheBounds", func(t *testing.T) {
		t.Parallel()
		var running, most, batches atomic.Int32
		var observed sync.Map // batch size -> how many batches of it Observe was told
		release := make(chan struct{})
		g := &batch.Gatherer[*item]{MaxBatch: 16, MaxWriters: 2, Observe: func(n int) {
			c, _ := observed.LoadOrStore(n, new(atomic.Int32))
			c.(*atomic.Int32).Add(1)
		}, Write: func(_ context.Context, b []*item) {
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			<-release // hold the writers so items queue behind them
			for _, it := range b {
				it.batchSize = len(b)
			}
			batches.Add(1)
			running.Add(-1)
		}}
		items := make([]*item, 100)
		var wg sync.WaitGroup
		for i := range items {
			items[i] = &item{}
			done := g.Submit(items[i])
			wg.Go(func() { <-done })
		}
		close(release)
		wg.Wait()
		if most.Load() > 2 {
			t.Errorf("%d writers ran at once, at most 2 allowed", most.Load())
		}
		for _, it := range items {
			if it.batchSize < 1 || it.batchSize > 16 {
				t.Fatalf("batch of %d, want 1 to 16", it.batchSize)
			}
		}
		if b := batches.Load(); b > 100-14*2 {
			t.Errorf("%d batches for 100 items: they were not gathered", b)
		}
		// Observe was told every batch written, at its size.
		var told, observedItems int32
		observed.Range(func(k, v any) bool {
			told += v.(*atomic.Int32).Load()
			observedItems += int32(k.(int)) * v.(*atomic.Int32).Load()
			return true
		})
		if told != batches.Load() || observedItems != 100 {
			t.Errorf("Observe was told %d batches of %d items; %d batches of 100 were written", told, observedItems, batches.Load())
		}
	})

	t.Run("ABurstIsNotSplitAfterItsFirstItem", func(t *testing.T) {
		t.Parallel()
		// River starts a fetch's dispatches together and each claims at
		// once: the writer that the first claim starts must not take it
		// alone and leave the rest a statement's wait behind it.
		const bursts, size = 20, 50
		var firsts []int
		for range bursts {
			var mu sync.Mutex
			var sizes []int
			g := &batch.Gatherer[*item]{MaxBatch: 256, MaxWriters: 2, Write: func(_ context.Context, b []*item) {
				mu.Lock()
				sizes = append(sizes, len(b))
				mu.Unlock()
			}}
			gate := make(chan struct{})
			var wg sync.WaitGroup
			for range size {
				wg.Go(func() {
					<-gate
					<-g.Submit(&item{})
				})
			}
			close(gate)
			wg.Wait()
			firsts = append(firsts, max(sizes[0], sizes[min(1, len(sizes)-1)]))
		}
		slices.Sort(firsts)
		if median := firsts[bursts/2]; median < size/5 {
			t.Errorf("the larger of a burst's first two batches held a median of %d of its %d items (all: %v): the burst was split", median, size, firsts)
		}
	})
}
