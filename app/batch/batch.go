// Package batch is the group commit behind Guardian's throughput: it
// gathers concurrent submissions into batches for one writer function
// (intake transactions, dispatch claims and outcomes, Redis filter calls;
// docs/design.md, "Throughput").
package batch

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"time"
)

// Gatherer batches concurrent submissions for one writer function. There
// is no timer. A writer starts as soon as an item arrives and fewer than
// MaxWriters are writing, so under no load an item is a batch of one and
// waits for one yield to the scheduler; under load, items gather while the
// writers' work runs, and one commit (or one round trip) serves many.
type Gatherer[T any] struct {
	// MaxBatch caps a batch; MaxWriters caps the writers running at once.
	MaxBatch   int
	MaxWriters int
	// Timeout bounds one batch's Write. Defaults to DefaultTimeout.
	Timeout time.Duration
	// Write handles one batch, recording each item's result in the item.
	Write func(ctx context.Context, batch []T)
	// Observe, when set, is told each batch's size before it is written.
	Observe func(items int)

	mu      sync.Mutex
	queue   []queued[T]
	writers int
}

type queued[T any] struct {
	item T
	done chan struct{}
}

// DefaultTimeout bounds one batch's work when Timeout is zero. An item's
// submitter may stop waiting sooner; the batch goes on.
const DefaultTimeout = 10 * time.Second

// Submit queues item and returns a channel closed once a batch holding it
// was written (its result is then in the item).
func (g *Gatherer[T]) Submit(item T) <-chan struct{} {
	q := queued[T]{item: item, done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, q)
	start := g.writers < max(g.MaxWriters, 1)
	if start {
		g.writers++
	}
	g.mu.Unlock()
	if start {
		go g.run()
	}
	return q.done
}

// run writes batches off the queue until it is empty.
func (g *Gatherer[T]) run() {
	g.gather()
	for {
		g.mu.Lock()
		if len(g.queue) == 0 {
			g.writers--
			g.mu.Unlock()
			return
		}
		n := min(len(g.queue), max(g.MaxBatch, 1))
		batch := slices.Clone(g.queue[:n])
		g.queue = slices.Delete(g.queue, 0, n)
		g.mu.Unlock()

		items := make([]T, n)
		for i, q := range batch {
			items[i] = q.item
		}
		timeout := g.Timeout
		if timeout == 0 {
			timeout = DefaultTimeout
		}
		if g.Observe != nil {
			g.Observe(n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		g.Write(ctx, items)
		cancel()
		for _, q := range batch {
			close(q.done)
		}
	}
}

// maxYields bounds how long a new writer lets a burst gather.
const maxYields = 8

// gather lets the goroutines ready to run queue their items before a new
// writer takes its first batch. Submit starts the writer on the submitter's
// own core, next in line, so without this a burst (River starts a fetch's
// dispatches together, and each claims) is written as its first item
// alone and then the rest, one statement's wait later. It yields to the
// scheduler while the queue grows, maxYields times at most; a lone item
// waits for one yield.
func (g *Gatherer[T]) gather() {
	n := g.queued()
	for range maxYields {
		runtime.Gosched()
		m := g.queued()
		if m == n {
			return
		}
		n = m
	}
}

// queued is how many items wait for a writer.
func (g *Gatherer[T]) queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}
