package fulfilment

import (
	"context"
	"slices"
	"sync"
	"time"
)

// gatherer batches concurrent submissions for one writer function: the
// group commit behind intake, claims and outcomes (docs/design.md,
// "Throughput"). There is no timer. A writer starts as soon as an item
// arrives and fewer than maxWriters are writing, so under no load an item
// is a batch of one and waits for nothing; under load, items gather while
// the writers' statements run, and one commit serves many.
type gatherer[T any] struct {
	maxBatch   int
	maxWriters int
	// write handles one batch, recording each item's result in the item.
	write func(ctx context.Context, batch []T)

	mu      sync.Mutex
	queue   []queued[T]
	writers int
}

type queued[T any] struct {
	item T
	done chan struct{}
}

// batchTimeout bounds one batch's work. An item's submitter may stop
// waiting sooner; the batch goes on.
const batchTimeout = 10 * time.Second

// submit queues item and returns a channel closed once a batch holding it
// was written (its result is then in the item).
func (g *gatherer[T]) submit(item T) <-chan struct{} {
	q := queued[T]{item: item, done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, q)
	start := g.writers < g.maxWriters
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
func (g *gatherer[T]) run() {
	for {
		g.mu.Lock()
		if len(g.queue) == 0 {
			g.writers--
			g.mu.Unlock()
			return
		}
		n := min(len(g.queue), g.maxBatch)
		batch := slices.Clone(g.queue[:n])
		g.queue = slices.Delete(g.queue, 0, n)
		g.mu.Unlock()

		items := make([]T, n)
		for i, q := range batch {
			items[i] = q.item
		}
		ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
		g.write(ctx, items)
		cancel()
		for _, q := range batch {
			close(q.done)
		}
	}
}
