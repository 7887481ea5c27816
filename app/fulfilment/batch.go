package fulfilment

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/db"
)

// Intake batching (docs/design.md, "Throughput"). Concurrent Accepts share
// one transaction: every delivery waiting when a writer starts is written
// with set-based statements and committed at once, and each is answered
// with its own outcome only after that commit returns. There is no timer:
// a writer starts as soon as a delivery arrives and no more than
// IntakeWriters are writing, so under no load a delivery is a batch of one
// and waits for nothing; under load, deliveries gather while the previous
// commits run, and one disk sync acknowledges many.
//
// A batch that fails (a row Postgres refuses, a lost connection) is retried
// row by row in transactions of their own, so one poison row fails only
// itself. Retrying is safe whatever the failed batch did: a batch commits
// whole or not at all, and an event committed by a batch whose commit
// answer was lost is found as a duplicate.

// Intake batching defaults.
const (
	// DefaultIntakeBatch caps the deliveries of one intake transaction.
	DefaultIntakeBatch = 256
	// DefaultIntakeWriters is how many intake transactions may run at once.
	DefaultIntakeWriters = 4
	// batchTimeout bounds one batch's transaction. The deliveries in it
	// wait at most their own request's deadline.
	batchTimeout = 10 * time.Second
)

// acceptCall is one delivery waiting for its batch.
type acceptCall struct {
	ev   provider.Event
	res  AcceptResult
	err  error
	done chan struct{}
}

// intakeBatcher gathers concurrent deliveries into transactions.
type intakeBatcher struct {
	svc        *Service
	maxBatch   int
	maxWriters int

	mu      sync.Mutex
	queue   []*acceptCall
	writers int
}

// record waits until ev is committed in some batch, or ctx ends. When ctx
// ends first the delivery may still be committed: the provider's retry
// then finds it as a duplicate, so nothing acknowledged is lost and
// nothing is acknowledged early.
func (b *intakeBatcher) record(ctx context.Context, ev provider.Event) (AcceptResult, error) {
	c := &acceptCall{ev: ev, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	start := b.writers < b.maxWriters
	if start {
		b.writers++
	}
	b.mu.Unlock()
	if start {
		go b.write()
	}
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		return AcceptResult{}, ctx.Err()
	}
}

// write takes batches off the queue until it is empty.
func (b *intakeBatcher) write() {
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.writers--
			b.mu.Unlock()
			return
		}
		n := min(len(b.queue), b.maxBatch)
		batch := slices.Clone(b.queue[:n])
		b.queue = slices.Delete(b.queue, 0, n)
		b.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
		b.svc.writeBatch(ctx, batch)
		cancel()
		for _, c := range batch {
			close(c.done)
		}
	}
}

// writeBatch records a batch, setting each call's result.
func (s *Service) writeBatch(ctx context.Context, batch []*acceptCall) {
	if len(batch) > 1 {
		err := s.cfg.Store.InTx(ctx, func(tx pgx.Tx) error { return s.recordBatchTx(ctx, tx, batch) })
		if err == nil {
			return
		}
		s.cfg.Logger.WarnContext(ctx, "intake batch failed; recording its deliveries one by one", "deliveries", len(batch), "error", err)
	}
	for _, c := range batch {
		c.res, c.err = s.recordOne(ctx, c.ev)
	}
}

// eventKey names an event within a batch.
type eventKey struct{ provider, id string }

// recordBatchTx writes a batch in tx: events in two statements, fulfilments
// in one, dispatch jobs in one COPY. Deliveries of one event in the batch
// are one row whose delivery count is theirs; of the events of one payment
// the first creates the fulfilment (invariant 1 holds through the
// fulfilment_one_per_payment index, within the batch and across batches).
func (s *Service) recordBatchTx(ctx context.Context, tx pgx.Tx, batch []*acceptCall) error {
	groups := map[eventKey][]*acceptCall{}
	var keys []eventKey
	for _, c := range batch {
		k := eventKey{c.ev.Provider, c.ev.ID}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], c)
	}
	// One lock order for every batch: no two batches deadlock.
	slices.SortFunc(keys, func(a, b eventKey) int { return cmp.Or(cmp.Compare(a.provider, b.provider), cmp.Compare(a.id, b.id)) })
	events := make([]db.BatchEvent, len(keys))
	for i, k := range keys {
		ev := groups[k][0].ev
		events[i] = db.BatchEvent{Deliveries: len(groups[k]), EventParams: db.EventParams{
			Provider: ev.Provider, EventID: ev.ID, Type: ev.Type, PaymentID: ev.PaymentID, Payload: ev.Payload, Origin: ev.Origin,
		}}
	}
	stored, err := db.InsertEvents(ctx, tx, events)
	if err != nil {
		return err
	}

	var creates []db.BatchFulfilment
	for i, k := range keys {
		first := groups[k][0]
		if stored[i].Inserted && first.ev.Fulfils() {
			creates = append(creates, db.BatchFulfilment{EventPK: stored[i].ID, Provider: first.ev.Provider, PaymentID: first.ev.PaymentID, Actor: cmp.Or(first.ev.Origin, "intake")})
		}
	}
	slices.SortStableFunc(creates, func(a, b db.BatchFulfilment) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.PaymentID, b.PaymentID))
	})
	created := map[int64]string{}
	if len(creates) > 0 {
		if created, err = db.InsertFulfilments(ctx, tx, creates, createdReason); err != nil {
			return err
		}
	}
	if len(created) > 0 {
		ids := make([]string, 0, len(created))
		for _, id := range created {
			ids = append(ids, id)
		}
		if err := s.cfg.Enqueuer.EnqueueDispatchTx(ctx, tx, ids...); err != nil {
			return err
		}
	}

	for i, k := range keys {
		for j, c := range groups[k] {
			c.res, c.err = AcceptResult{Outcome: DuplicatePostgres}, nil
			if j == 0 && stored[i].Inserted {
				c.res = AcceptResult{Outcome: NewEvent, FulfilmentID: created[stored[i].ID]}
			}
		}
	}
	return nil
}
