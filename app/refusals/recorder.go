// Package refusals is the record of refused webhook requests: a bounded
// recorder that never makes a sender wait, and the record's bounds, which
// the leader's maintenance keeps (jobs: prune_refusals). Nothing a sender
// wrote is kept: only why it was refused, Guardian's answer, the client's
// address and the body's size (docs/security.md).
package refusals

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/guardian-pay/guardian/app/metrics"
	"github.com/guardian-pay/guardian/db"
)

// The record's bounds: refusals older than Retention, and beyond the
// newest Rows, are pruned.
const (
	Retention = 7 * 24 * time.Hour
	Rows      = 100_000
)

// Bounds of the recorder: a queue of refusalQueue, batches of at most
// refusalBatch rows, at most refusalRate rows a second.
const (
	refusalQueue = 1024
	refusalBatch = 256
	refusalRate  = 1000 // rows a second
)

// Recorder records refused requests for operators without letting a flood
// of them reach Postgres: a bounded queue, one writer, at most refusalRate
// rows a second. What does not fit is counted
// (guardian_refused_dropped_total) and dropped; every refusal is counted in
// guardian_refused_total{provider,reason} either way.
//
// It is not an app/batch.Gatherer on purpose: a Gatherer's submitter waits
// for its batch to be written, and a flood of forged requests must never
// wait on (or for) Postgres. Here a refusal is queued or dropped at once.
type Recorder struct {
	store   *db.Store
	metrics *metrics.Metrics
	logger  *slog.Logger

	once    sync.Once // starts the writer
	started atomic.Bool
	closed  sync.Once
	queue   chan db.Refusal
	stop    chan struct{}
	done    chan struct{}
}

// New returns a Recorder writing through store (nil: count only). Its
// writer starts with the first refusal; Close stops it.
func New(store *db.Store, m *metrics.Metrics, logger *slog.Logger) *Recorder {
	return &Recorder{store: store, metrics: m, logger: logger,
		queue: make(chan db.Refusal, refusalQueue), stop: make(chan struct{}), done: make(chan struct{})}
}

// Record queues r, starting the writer on first use, or drops it when the
// queue is full. It never waits.
func (l *Recorder) Record(r db.Refusal) {
	l.metrics.Refused(r.Provider, string(r.Reason))
	if l.store == nil {
		return
	}
	l.once.Do(func() { l.started.Store(true); go l.run() })
	select {
	case l.queue <- r:
	default:
		l.metrics.RefusalDropped()
	}
}

func (l *Recorder) run() {
	defer close(l.done)
	for {
		var batch []db.Refusal
		select {
		case r := <-l.queue:
			batch = append(batch, r)
		case <-l.stop:
			return
		}
	drain:
		for len(batch) < refusalBatch {
			select {
			case r := <-l.queue:
				batch = append(batch, r)
			default:
				break drain
			}
		}
		l.write(batch)
		select {
		case <-time.After(time.Duration(len(batch)) * time.Second / refusalRate):
		case <-l.stop:
			return
		}
	}
}

// write records a batch in one statement; a batch Postgres refuses is
// written again row by row, so a row that cannot be written (a poison
// row) is lost alone and never takes its neighbours with it.
func (l *Recorder) write(batch []db.Refusal) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := db.InsertRefusals(ctx, l.store.Pool(), batch)
	if err == nil {
		return
	}
	if len(batch) == 1 {
		l.logger.Warn("could not record a refused request", "reason", batch[0].Reason, "error", err)
		return
	}
	for _, r := range batch {
		l.write([]db.Refusal{r})
	}
}

// Close stops the writer, if it started, and keeps it from starting. Safe
// more than once.
func (l *Recorder) Close() {
	l.once.Do(func() {})
	l.closed.Do(func() {
		if l.started.Load() {
			close(l.stop)
			<-l.done
		}
	})
}
