package fulfilment

import (
	"cmp"
	"context"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/db"
)

// Intake batching (docs/design.md, "Throughput"). Concurrent Accepts share
// one transaction (a batch.Gatherer): every delivery waiting when a writer
// starts is written with set-based statements and committed at once, and
// each is answered with its own outcome only after that commit returns.
//
// A batch that fails (a row Postgres refuses, a lost connection) is retried
// row by row in transactions of their own, so one poison row fails only
// itself. Retrying is safe whatever the failed batch did: a batch commits
// whole or not at all, and an event committed by a batch whose commit
// answer was lost is found as a duplicate.

// Batching defaults.
const (
	// DefaultBatch caps the items of one batch.
	DefaultBatch = 256
	// DefaultBatchWriters is how many batches of one kind may run at once.
	DefaultBatchWriters = 4
)

// acceptCall is one delivery waiting for its batch, and then its result.
type acceptCall struct {
	ev  provider.Event
	res AcceptResult
	err error
}

// recordBatched waits until ev is committed in some batch, or ctx ends.
// When ctx ends first the delivery may still be committed: the provider's
// retry then finds it as a duplicate, so nothing acknowledged is lost and
// nothing is acknowledged early.
func (s *Service) recordBatched(ctx context.Context, ev provider.Event) (AcceptResult, error) {
	c := &acceptCall{ev: ev}
	select {
	case <-s.intake.Submit(c):
		return c.res, c.err
	case <-ctx.Done():
		return AcceptResult{}, ctx.Err()
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
			creates = append(creates, db.BatchFulfilment{EventPK: stored[i].ID, Actor: cmp.Or(first.ev.Origin, "intake")})
		}
	}
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

// claimCall is one dispatch's claim waiting for its batch.
type claimCall struct {
	p   db.ClaimParams
	in  db.DispatchInput
	err error
}

// claim commits req's claim, alone or in a batch of concurrent claims, and
// waits for it whatever ctx says: a claim that committed must be known to
// its dispatcher, which then finds its deadline passed and sends nothing.
func (s *Service) claim(ctx context.Context, p db.ClaimParams) (db.DispatchInput, error) {
	if s.claims == nil {
		return db.ClaimForDispatch(ctx, s.cfg.Store.Pool(), p.ID, p.Actor, p.Evidence, p.Timeout)
	}
	c := &claimCall{p: p}
	<-s.claims.Submit(c)
	return c.in, c.err
}

// writeClaims claims a batch in one statement. A fulfilment named twice in
// one batch (two jobs for it at once) is claimed by the first; the second
// finds it claimed, as it would a moment later. A failed statement is
// retried claim by claim.
func (s *Service) writeClaims(ctx context.Context, batch []*claimCall) {
	seen := map[string]bool{}
	var params []db.ClaimParams
	for _, c := range batch {
		if !seen[c.p.ID] {
			seen[c.p.ID] = true
			params = append(params, c.p)
		}
	}
	claimed, err := db.ClaimManyForDispatch(ctx, s.cfg.Store.Pool(), params)
	if err != nil && len(batch) > 1 {
		for _, c := range batch {
			c.in, c.err = db.ClaimForDispatch(ctx, s.cfg.Store.Pool(), c.p.ID, c.p.Actor, c.p.Evidence, c.p.Timeout)
		}
		return
	}
	given := map[string]bool{}
	for _, c := range batch {
		in, ok := claimed[c.p.ID]
		switch {
		case err != nil:
			c.err = err
		case !ok || given[c.p.ID]:
			c.err = db.ErrConflict
		default:
			c.in, given[c.p.ID] = in, true
		}
	}
}

// outcomeCall is one conditional move waiting for its batch.
type outcomeCall struct {
	p   db.TransitionParams
	err error
}

// transit makes one conditional move, alone or in a batch of concurrent
// ones: nil, db.ErrConflict when the row was elsewhere, or the error that
// kept it from being written.
func (s *Service) transit(ctx context.Context, p db.TransitionParams) error {
	if s.outcomes == nil {
		_, err := db.Transit(ctx, s.cfg.Store.Pool(), p)
		return err
	}
	c := &outcomeCall{p: p}
	<-s.outcomes.Submit(c)
	return c.err
}

// writeOutcomes makes a batch of moves in one statement; a row named twice
// and every move of a failed statement are written move by move.
func (s *Service) writeOutcomes(ctx context.Context, batch []*outcomeCall) {
	seen := map[string]bool{}
	var together, single []*outcomeCall
	var params []db.TransitionParams
	for _, c := range batch {
		if seen[c.p.ID] {
			single = append(single, c)
			continue
		}
		seen[c.p.ID] = true
		together, params = append(together, c), append(params, c.p)
	}
	moved, err := db.TransitMany(ctx, s.cfg.Store.Pool(), params)
	switch {
	case err != nil && len(batch) > 1:
		single = append(single, together...)
	case err != nil:
		together[0].err = err
	default:
		for _, c := range together {
			if _, ok := moved[c.p.ID]; !ok {
				c.err = db.ErrConflict
			}
		}
	}
	for _, c := range single {
		_, c.err = db.Transit(ctx, s.cfg.Store.Pool(), c.p)
	}
}
