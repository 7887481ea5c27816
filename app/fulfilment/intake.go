package fulfilment

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

// IntakeOutcome says what intake made of a delivery: a new event or a
// duplicate, and which check caught it. (A connector call's outcome is
// state.Outcome.)
type IntakeOutcome int

const (
	// NewEvent means the event was stored by this delivery.
	NewEvent IntakeOutcome = iota
	// DuplicateFiltered means the filter knew the event was committed;
	// Postgres was not touched.
	DuplicateFiltered
	// DuplicatePostgres means Postgres already held the event; the delivery
	// was counted.
	DuplicatePostgres
)

// String names the outcome for logs and metrics.
func (o IntakeOutcome) String() string {
	switch o {
	case DuplicateFiltered:
		return "duplicate_filter"
	case DuplicatePostgres:
		return "duplicate_postgres"
	default:
		return "new"
	}
}

// AcceptResult reports what Accept did.
type AcceptResult struct {
	Outcome IntakeOutcome
	// Created are the fulfilments this delivery created, one per action
	// its purchase pays for, each pending or, for an action already taken
	// back, needs_reconciliation (see born).
	Created []db.Born
	// FulfilmentID and FulfilmentState are the first of Created: its id
	// and the state it was born in; empty when none was created.
	FulfilmentID    string
	FulfilmentState state.State
	// took is what the delivery's batch took back, and subs the
	// subscriptions it started and ended, for the metrics.
	took tookBack
	subs subscriptionCounts
}

// subscriptionCounts are the subscriptions a batch linked for the first
// time, and the ends it stored.
type subscriptionCounts struct {
	started, ended       []db.SubscriptionRef
	suspended, regranted []string // by provider
}

// Accept records a verified event exactly once. It returns only after the
// event is committed to Postgres (or was already), so an acknowledgement
// sent after Accept returns nil is never lost. An error means nothing is
// known to be committed and the provider must retry, but for
// db.ErrRebound: a second body under a signed transmission id
// (provider.Event.Transmission), refused for good.
//
// The filter, when configured, is asked first and told last: only a mark
// written after the commit may answer "duplicate".
func (s *Service) Accept(ctx context.Context, ev provider.Event) (AcceptResult, error) {
	// Attributes inline rather than a derived logger: this is the hottest
	// path, and a duplicate answered by the filter logs nothing.
	if s.cfg.Filter != nil {
		seen, err := s.cfg.Filter.Committed(ctx, ev.Provider, ev.ID)
		if err != nil {
			s.cfg.Metrics.FilterError("check", err)
			s.cfg.Logger.DebugContext(ctx, "duplicate filter unavailable, asking Postgres", "provider", ev.Provider, "event_id", ev.ID, "error", err)
		} else if seen {
			return AcceptResult{Outcome: DuplicateFiltered}, nil
		}
	}

	// A provider whose signature binds the body only weakly (PayPal's
	// CRC32): one body per signed transmission, for good.
	if t := ev.Transmission; t != nil {
		if err := db.BindTransmission(ctx, s.cfg.Store.Pool(), ev.Provider, t.ID, t.BodySHA256[:]); err != nil {
			return AcceptResult{}, err
		}
	}

	var res AcceptResult
	var err error
	if s.intake != nil {
		res, err = s.recordBatched(ctx, ev)
	} else {
		res, err = s.recordOne(ctx, ev)
	}
	if err != nil {
		return AcceptResult{}, err
	}

	for to, ids := range res.took.stopped {
		s.countMoved(ctx, state.Pending, to, ids)
	}
	s.countMoved(ctx, "", state.Pending, res.took.revoking)
	for _, sub := range res.subs.started {
		s.cfg.Metrics.Subscription(sub.Provider, "start")
	}
	for _, sub := range res.subs.ended {
		s.cfg.Metrics.Subscription(sub.Provider, "end")
	}
	for _, p := range res.subs.suspended {
		s.cfg.Metrics.Subscription(p, "suspension")
	}
	for _, p := range res.subs.regranted {
		s.cfg.Metrics.Subscription(p, "regrant")
	}
	if res.Outcome == NewEvent && ev.Purchase != nil && ev.Purchase.Kind == provider.Renewal {
		s.cfg.Metrics.Subscription(ev.Provider, "renewal")
	}
	for _, b := range res.Created {
		s.cfg.Metrics.Transition(b.Action, "", b.State, 1)
		if b.State == state.NeedsReconciliation {
			s.cfg.Logger.WarnContext(ctx, "event stored for a payment already taken back: its fulfilment is parked until a lookup says whether the receiver acted",
				"provider", ev.Provider, "event_id", ev.ID, "payment_id", ev.PaymentID, "fulfilment_id", b.ID, "action_name", b.Action, "event_type", ev.Type)
		} else {
			s.cfg.Logger.InfoContext(ctx, "event stored, fulfilment created", "provider", ev.Provider, "event_id", ev.ID, "payment_id", ev.PaymentID, "fulfilment_id", b.ID, "action_name", b.Action, "event_type", ev.Type)
		}
	}
	switch {
	case len(res.Created) > 0:
	case res.Outcome == NewEvent && ev.Fulfils():
		s.cfg.Logger.InfoContext(ctx, "event stored; the payment's actions already have their fulfilments, or its routes name none", "provider", ev.Provider, "event_id", ev.ID, "payment_id", ev.PaymentID, "event_type", ev.Type)
	case res.Outcome == NewEvent && ev.Unmapped != "":
		// Paid, by its own word, and no payment Guardian can read: stored,
		// acknowledged and flagged, never silently dropped.
		s.cfg.Metrics.Unmapped(ev.Provider)
		s.cfg.Logger.WarnContext(ctx, "paid event names no payment Guardian can read: flagged for an operator", "provider", ev.Provider, "event_id", ev.ID, "event_type", ev.Type, "why", ev.Unmapped)
	case res.Outcome == NewEvent && ev.Note != "":
		s.cfg.Logger.InfoContext(ctx, "event stored; it does not fulfil", "provider", ev.Provider, "event_id", ev.ID, "event_type", ev.Type, "why", ev.Note)
	case res.Outcome == NewEvent:
		s.cfg.Logger.DebugContext(ctx, "event stored; type does not fulfil", "provider", ev.Provider, "event_id", ev.ID, "event_type", ev.Type)
	}

	// Only now, after the commit, may the filter learn the event.
	if s.cfg.Filter != nil {
		if err := s.cfg.Filter.MarkCommitted(ctx, ev.Provider, ev.ID); err != nil {
			s.cfg.Metrics.FilterError("mark", err)
			s.cfg.Logger.DebugContext(ctx, "duplicate filter mark failed; later duplicates go to Postgres", "provider", ev.Provider, "event_id", ev.ID, "error", err)
		}
	}
	return res, nil
}

// createdReason is the first transition's reason of a fulfilment made by
// intake.
const createdReason = "payment event received"

// recordOne records one event in a transaction of its own: a batch of one.
func (s *Service) recordOne(ctx context.Context, ev provider.Event) (AcceptResult, error) {
	c := &acceptCall{ev: ev}
	if err := s.recordTx(ctx, []*acceptCall{c}); err != nil {
		return AcceptResult{}, fmt.Errorf("record event: %w", err)
	}
	return c.res, c.err
}

// recordTx records a batch in a transaction of its own: a plain one in
// one round trip (db.RecordPlainBatch), and again the longer way if its
// rows need that (db.ErrNotPlain); any other in as many as its events
// need.
func (s *Service) recordTx(ctx context.Context, batch []*acceptCall) error {
	// A batch that may make jobs and takes the turn notifies River's
	// workers after its commit; taken before what it makes is known, the
	// turn may go to a batch of known events, whose notification finds
	// nothing to fetch. A batch that does not take it owes its jobs one.
	// A turn whose notification was never sent (the batch failed) or
	// failed is owed again: other batches' jobs committed since the last
	// notification counted on it.
	turn := slices.ContainsFunc(batch, func(c *acceptCall) bool { return c.ev.Fulfils() }) && s.takeTurn()
	record := func(mayBePlain bool) func(pgx.Tx) error {
		return func(tx pgx.Tx) error {
			if turn {
				db.NotifyOnCommit(tx, s.jobs, s.notified)
			}
			return s.recordBatchTx(ctx, tx, batch, mayBePlain)
		}
	}
	err := s.cfg.Store.InPipelinedTx(ctx, record(true))
	if errors.Is(err, db.ErrNotPlain) {
		err = s.cfg.Store.InPipelinedTx(ctx, record(false))
	}
	switch {
	case err != nil && turn:
		s.owe()
	case err == nil && !turn && slices.ContainsFunc(batch, func(c *acceptCall) bool { return queued(c.res.Created) }):
		s.owe()
	}
	return err
}

// create makes the fulfilments of the payment's actions (only action's,
// when it is set) and their dispatch jobs in tx, for each action that has
// no fulfilment that holds it (see db.InsertFulfilments); it returns those
// made. Replay and retry make fulfilments here; intake's batches make
// theirs in recordBatchTx, revocations are made by takeBack.
func (s *Service) create(ctx context.Context, tx pgx.Tx, eventPK int64, action, actor, reason string) ([]db.Born, error) {
	return s.born(ctx, tx, []db.BatchFulfilment{{EventPK: eventPK, Actor: actor, Action: action}}, reason)
}

// askReversed is the first transition's reason of a fulfilment born parked:
// its payment was taken back before Guardian recorded anything sent for it.
const askReversed = "payment reversed before Guardian recorded a fulfilment: whether the receiver acted under the payment's key " +
	"(a restored database forgets what it sent) is asked by lookup; done is taken back, not done is cancelled"

// born makes the fulfilments of items in tx (db.InsertFulfilments) and, in
// the same statement, a dispatch job for each born pending, written as the
// Enqueuer names it; it returns every one made. Once tx has committed, the
// caller announces them.
//
// A payment already taken back has nothing sent for it as far as
// Guardian's rows know, but its rows may be younger than what its receiver
// did: a database restored from before the fulfilment went out forgets
// it, and the provider's redelivery may bring the reversal first. Keys
// derive from the payment, so with a lookup Guardian asks instead of
// guessing: such a fulfilment of an action with a lookup is born
// needs_reconciliation, never dispatched, and the reconciler's answer
// settles it (done: fulfilled and taken back; not done: cancelled). An
// action without a lookup has nobody to ask, and none is made: rows
// decide, as docs/operations.md says of a restore. Each action is decided
// on its own: one taken back, or not taken back by its policy, holds no
// other back.
func (s *Service) born(ctx context.Context, tx pgx.Tx, items []db.BatchFulfilment, reason string) ([]db.Born, error) {
	return db.InsertFulfilments(ctx, tx, items, s.birth(reason))
}

// birth is how intake, replay, retry and routing make fulfilments (born).
func (s *Service) birth(reason string) db.Birth {
	return db.Birth{Reason: reason, Reversed: state.NeedsReconciliation, ReversedReason: askReversed, Asks: s.asks, Jobs: s.jobs}
}

// notices is when this process last took the turn to notify River's
// workers of new jobs, and when it last committed jobs that no
// notification has announced yet (zero: none).
//
// River's working clients, in every process, are told of new dispatch
// jobs by River's insert notification, sent once the transaction that
// wrote them has committed (db.NotifyJobs says why not by it). This
// process notifies at most once in the enqueuer's NotifyEvery, as River's
// insert does. An intake batch that takes the turn carries the
// notification right after its COMMIT, in the same round trip
// (db.NotifyOnCommit); jobs committed without one are owed one, sent at
// the end of NotifyEvery unless a turn has been taken since, so none is
// left to River's one-second poll.
type notices struct {
	mu         sync.Mutex
	last, owed time.Time
}

// takeTurn takes the turn to notify, if it is due.
func (s *Service) takeTurn() bool {
	n := &s.notices
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	if now.Sub(n.last) < s.jobs.NotifyEvery {
		return false
	}
	n.last = now
	return true
}

// announce tells River's workers of the jobs of created, committed by a
// transaction that carried no notification: at once if the turn is due,
// else at the end of NotifyEvery (owe). The caller does not wait for it.
func (s *Service) announce(created []db.Born) {
	if !queued(created) {
		return
	}
	if s.takeTurn() {
		go s.notifyJobs()
		return
	}
	s.owe()
}

// queued says whether any of created was born pending, with a dispatch
// job.
func queued(created []db.Born) bool {
	return slices.ContainsFunc(created, func(b db.Born) bool { return b.State == state.Pending })
}

// owe records jobs committed unannounced, and makes sure a notification
// follows them within NotifyEvery.
func (s *Service) owe() {
	n := &s.notices
	n.mu.Lock()
	defer n.mu.Unlock()
	armed := !n.owed.IsZero()
	n.owed = time.Now()
	if armed {
		return // the notification owed already covers these jobs
	}
	time.AfterFunc(s.jobs.NotifyEvery, s.payOwed)
}

// payOwed sends the notification owed, at the end of NotifyEvery. A turn
// taken since the jobs were owed announces them after its commit, and
// nothing more is sent. A turn taken before them, since the notification
// was owed, moves it to that turn's NotifyEvery later: sent now, it would
// follow the turn's sooner than River's insert would.
func (s *Service) payOwed() {
	n := &s.notices
	n.mu.Lock()
	if n.last.After(n.owed) {
		n.owed = time.Time{}
		n.mu.Unlock()
		return
	}
	if wait := s.jobs.NotifyEvery - time.Since(n.last); wait > 0 {
		time.AfterFunc(wait, s.payOwed)
		n.mu.Unlock()
		return
	}
	n.owed = time.Time{}
	n.last = time.Now()
	n.mu.Unlock()
	s.notifyJobs()
}

// notifyJobs sends River's insert notification on a connection of its
// own. Failing, it costs the jobs a wait for their working clients' next
// poll.
func (s *Service) notifyJobs() {
	ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
	defer cancel()
	if err := db.NotifyJobs(ctx, s.cfg.Store.Pool(), s.jobs); err != nil {
		s.cfg.Logger.Warn("new dispatch jobs wait for River's next poll", "error", err)
	}
}

// notified hears how an intake batch's notification after its commit
// went (db.NotifyOnCommit): one that failed is owed again, so that the
// jobs it was to announce wait NotifyEvery more, not River's poll.
func (s *Service) notified(err error) {
	if err != nil {
		s.cfg.Logger.Warn("the notification of an intake batch's new jobs failed; it is sent again", "error", err)
		s.owe()
	}
}

// notifyTimeout bounds a notification's round trip.
const notifyTimeout = 5 * time.Second

// ReplayResult says what a replay did.
type ReplayResult struct {
	// Event is the stored event replayed.
	Event db.Event
	// Created are the fulfilments the replay created: one for each action
	// of the payment's purchase that had none that holds it. FulfilmentID
	// is the first one's id.
	Created      []db.Born
	FulfilmentID string
	// Fulfils is false when the event's type does not fulfil a payment.
	Fulfils bool
}

// remap applies the event's provider's rules to its stored body again, and
// records the payment it names now (clearing an unmapped flag); nothing
// changes when the rules still name none.
func (s *Service) remap(ctx context.Context, tx pgx.Tx, ev db.Event) (db.Event, error) {
	m, ok := s.cfg.Mappers[ev.Provider]
	if !ok {
		return ev, nil
	}
	mapped, err := m.Map(ev.Type, ev.Payload)
	if err != nil || mapped.PaymentID == "" {
		return ev, nil
	}
	if err := db.SetEventPayment(ctx, tx, ev.ID, mapped.PaymentID); err != nil {
		return ev, err
	}
	s.cfg.Logger.InfoContext(ctx, "replayed event mapped to a payment by the rules as they are now", "provider", ev.Provider, "event_id", ev.EventID, "payment_id", mapped.PaymentID, "was_unmapped", ev.Unmapped)
	ev.PaymentID, ev.Unmapped = mapped.PaymentID, ""
	return ev, nil
}

// Replay runs a stored event through the fulfilment dedup path again, for
// an operator: it creates a fulfilment only if the payment has none that
// holds it, so replaying an event that is fulfilled, in flight, parked or
// cancelled changes nothing. An event stored without a payment is mapped
// again by its provider's rules as they are now (Config.Mappers): once the
// configuration behind an unmapped event is fixed, its replay fulfils it.
// It returns db.ErrNotFound for an unknown event.
func (s *Service) Replay(ctx context.Context, providerName, eventID, operator string) (ReplayResult, error) {
	var res ReplayResult
	var created []db.Born
	err := s.cfg.Store.InTx(ctx, func(tx pgx.Tx) error {
		ev, err := db.GetEvent(ctx, tx, providerName, eventID)
		if err != nil {
			return err
		}
		if ev.PrunedAt != nil {
			return db.ErrPruned // nothing to read the rules from, nor to send
		}
		if ev.PaymentID == "" {
			if ev, err = s.remap(ctx, tx, ev); err != nil {
				return err
			}
		}
		res = ReplayResult{Event: ev, Fulfils: ev.PaymentID != ""}
		if !res.Fulfils {
			return nil
		}
		// A purchase first recorded as paid by this replay is routed by
		// the routes in force now; one recorded before keeps its actions.
		// A subscription it starts is linked as intake links it, before
		// its rows are made: an end stored before takes back what it
		// grants.
		pe := s.readStored(ev)
		if err := s.recordPurchases(ctx, tx, []db.PurchaseRecord{s.route(pe)}); err != nil {
			return err
		}
		var links db.Links
		addLinks(&links, pe)
		linked, err := s.link(ctx, tx, links)
		if err != nil {
			return err
		}
		actor := "operator " + operator
		created, err = s.create(ctx, tx, ev.ID, "", actor, "replay of stored event")
		if len(created) > 0 {
			res.FulfilmentID = created[0].ID
		}
		res.Created = created
		if err == nil && len(linked.Reversed) > 0 {
			_, _, err = s.takeBack(ctx, tx, actor, linked.Reversed, time.Time{})
		}
		return err
	})
	if err != nil {
		return ReplayResult{}, fmt.Errorf("replay event: %w", err)
	}
	s.announce(created)
	for _, b := range created {
		s.cfg.Metrics.Transition(b.Action, "", b.State, 1)
	}
	s.cfg.Logger.InfoContext(ctx, "event replayed", "provider", providerName, "event_id", eventID, "operator", operator, "fulfilment_id", res.FulfilmentID)
	return res, nil
}

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
		err := s.recordTx(ctx, batch)
		if err == nil {
			return
		}
		s.cfg.Logger.WarnContext(ctx, "intake batch failed; recording its deliveries one by one", "deliveries", len(batch), "error", err)
	}
	for _, c := range batch {
		c.res, c.err = s.recordOne(ctx, c.ev)
	}
}

// route decides the actions a paid event's purchase pays for, by the
// routes in force, and the purchase's detail as receivers are sent it; or,
// where the routes need items the event does not name, records it
// awaiting them (awaitsItems).
func (s *Service) route(ev provider.Event) db.PurchaseRecord {
	p := provider.PurchaseOf(ev, s.cfg.Mode)
	detail, err := json.Marshal(p)
	if err != nil {
		detail = nil // a Purchase of strings and numbers always marshals
	}
	rec := db.PurchaseRecord{Payment: db.Payment{Provider: ev.Provider, PaymentID: ev.PaymentID}, Routes: s.cfg.Actions.Digest, Detail: detail}
	if s.awaitsItems(ev, p) {
		rec.AwaitingItems = ev.ItemsRef
	} else {
		rec.Actions = s.cfg.Actions.Route(p)
	}
	return rec
}

// readStored is a stored event as its provider's rules read its body
// again, where they are configured (Config.Mappers) and still name its
// payment; else what the row names.
func (s *Service) readStored(ev db.Event) provider.Event {
	pe := provider.Event{Provider: ev.Provider, ID: ev.EventID, Type: ev.Type, PaymentID: ev.PaymentID}
	if m, ok := s.cfg.Mappers[ev.Provider]; ok {
		if mapped, err := m.Map(ev.Type, ev.Payload); err == nil && mapped.PaymentID == ev.PaymentID {
			pe = mapped
		}
	}
	return pe
}

// amount is m as the event row stores it.
func amount(m *provider.Money) *db.Amount {
	if m == nil {
		return nil
	}
	return &db.Amount{Minor: m.Minor, Currency: m.Currency}
}

// eventKey names an event within a batch.
type eventKey struct{ provider, id string }

// recordBatchTx writes a batch in tx: the events with their purchases in
// one statement (and the known ones counted in a second), the fulfilments
// with their transitions and dispatch jobs in another. Deliveries of one
// event in the batch are one row whose delivery count is theirs; of the
// events of one payment the first creates its fulfilments (invariant 1
// holds per action through the fulfilment_one_per_action index, within
// the batch and across batches).
//
// A plain batch (see plain) is written in one round trip instead, when
// mayBePlain (db.RecordPlainBatch).
func (s *Service) recordBatchTx(ctx context.Context, tx pgx.Tx, batch []*acceptCall, mayBePlain bool) error {
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
			Unmapped: ev.Unmapped, DeliveryID: ev.DeliveryID, Amount: amount(ev.Paid),
			Resumes: ev.Resumes,
		}}
		events[i].Reverses, events[i].Revokes = s.reverses(ev)
		if ev.Fulfils() {
			// Recorded only if the event is stored now (db.InsertEvents):
			// routed before that is known, so a duplicate that reaches
			// Postgres is routed for nothing, the price of the round trip
			// the purchases no longer take.
			p := s.route(ev)
			events[i].Purchase = &p
		}
		if r := ev.Reversal; r != nil {
			events[i].Reversal = r.String()
			switch r.Kind {
			case provider.End:
				events[i].Ends = r.Subscription
			case provider.Suspension:
				events[i].Suspends = r.Subscription
			}
			if r.Kind == provider.Refund {
				events[i].Amount, events[i].RefundID, events[i].RefundCumulative = amount(r.Amount), r.RefundID, r.Cumulative
				events[i].RefundOf = s.refundOf(ev)
			}
		}
	}
	if mayBePlain && plain(keys, groups, events) {
		return s.recordPlain(ctx, tx, keys, groups, events)
	}
	stored, err := db.InsertEvents(ctx, tx, events)
	if err != nil {
		return err
	}
	var awaiting []db.Payment
	for i := range stored {
		if stored[i].Awaiting {
			awaiting = append(awaiting, events[i].Purchase.Payment)
		}
	}
	if len(awaiting) > 0 {
		if err := s.cfg.Enqueuer.EnqueueRouteTx(ctx, tx, awaiting...); err != nil {
			return fmt.Errorf("enqueue routing: %w", err)
		}
	}

	// A purchase's actions were decided above, once: by the routes in
	// force when it is first recorded as paid, in the statement that
	// stores its paying event and the transaction that makes its rows. A
	// purchase recorded before keeps its actions. A subscription's start
	// is linked to its purchase, and the ends of subscriptions are
	// resolved to theirs, before any row is made: an end stored before
	// its start makes the start's purchase reversed, and it grants
	// nothing.
	var creates []db.BatchFulfilment
	var links db.Links
	for i, k := range keys {
		first := groups[k][0]
		if !stored[i].Inserted {
			continue
		}
		if first.ev.Fulfils() {
			creates = append(creates, db.BatchFulfilment{EventPK: stored[i].ID, Actor: cmp.Or(first.ev.Origin, "intake")})
		}
		addLinks(&links, first.ev)
		if events[i].Ends != "" {
			links.Ends = append(links.Ends, db.SubscriptionRef{Provider: events[i].Provider, SubscriptionID: events[i].Ends})
		}
		if sub, resumes := cmp.Or(events[i].Suspends, events[i].Resumes), events[i].Resumes != ""; sub != "" {
			links.Standings = append(links.Standings, db.SubscriptionStanding{
				Provider: events[i].Provider, SubscriptionID: sub, EventPK: stored[i].ID, Resume: resumes, At: first.ev.StandingAt})
		}
		for _, named := range []string{events[i].Reverses, events[i].RefundOf} {
			if named != "" {
				links.Named = append(links.Named, db.Payment{Provider: events[i].Provider, PaymentID: named})
			}
		}
	}
	linked, err := db.LinkSubscriptions(ctx, tx, links)
	if err != nil {
		return err
	}
	// A resumption that grants again pays for a purchase of its own,
	// recorded by LinkSubscriptions: its rows are made as any purchase's.
	for _, pk := range linked.Regrants {
		creates = append(creates, db.BatchFulfilment{EventPK: pk, Actor: "intake"})
	}
	// Before any fulfilment is made: a payment its refunds returned whole
	// is never fulfilled (InsertFulfilments reads reverses).
	whole, err := s.weighRefunds(ctx, tx, events, stored, linked.Weigh)
	if err != nil {
		return err
	}
	// A reversal the policy takes back for: the payment's fulfilment is
	// cancelled if it has not gone out, or taken back if it is done. A
	// subscription's end is one once its purchase is known.
	reversed := append(whole, linked.Reversed...)
	for i := range keys {
		if stored[i].Inserted && events[i].Reverses != "" {
			reversed = append(reversed, db.Payment{Provider: events[i].Provider, PaymentID: events[i].Reverses})
		}
	}
	created := map[int64][]db.Born{}
	if len(creates) > 0 {
		if len(reversed) == 0 {
			// Nothing is taken back after the fulfilments are made: the
			// batch commits in their statement's round trip
			// (db.InPipelinedTx). What follows it only reads its rows.
			db.CommitWithNext(tx)
		}
		born, err := s.born(ctx, tx, creates, createdReason)
		if err != nil {
			return err
		}
		for _, b := range born {
			created[b.EventPK] = append(created[b.EventPK], b)
		}
	}
	var took tookBack
	if len(reversed) > 0 {
		if took.stopped, took.revoking, err = s.takeBack(ctx, tx, "intake", reversed, time.Time{}); err != nil {
			return err
		}
	}

	answer(keys, groups, stored, created)
	// What the batch's reversals moved, and the subscriptions it started
	// and ended, are counted once, by the first delivery's Accept, after
	// the commit.
	batch[0].res.took = took
	subs := subscriptionCounts{started: linked.Linked, ended: links.Ends}
	for _, st := range links.Standings {
		switch {
		case !st.Resume:
			subs.suspended = append(subs.suspended, st.Provider)
		case slices.Contains(linked.Regrants, st.EventPK):
			subs.regranted = append(subs.regranted, st.Provider)
		}
	}
	batch[0].res.subs = subs
	return nil
}

// answer sets each delivery's result: the first delivery of an event
// stored new is answered with the fulfilments made for it (created, by
// event), every other as a duplicate. An event neither stored nor found
// (db.RecordPlainBatch) is answered with errEventLost.
func answer(keys []eventKey, groups map[eventKey][]*acceptCall, stored []db.BatchEventResult, created map[int64][]db.Born) {
	for i, k := range keys {
		for j, c := range groups[k] {
			c.res, c.err = AcceptResult{Outcome: DuplicatePostgres}, nil
			switch {
			case stored[i].ID == 0:
				c.res, c.err = AcceptResult{}, errEventLost
			case j == 0 && stored[i].Inserted:
				c.res = AcceptResult{Outcome: NewEvent, Created: created[stored[i].ID]}
				if bs := c.res.Created; len(bs) > 0 {
					c.res.FulfilmentID, c.res.FulfilmentState = bs[0].ID, bs[0].State
				}
			}
		}
	}
}

// errEventLost answers a delivery whose event its batch neither stored
// nor found: deleted meanwhile (the retention). Nothing acknowledges it,
// and the provider's retry records it again.
var errEventLost = errors.New("record event: the event was neither stored nor found (deleted meanwhile); not acknowledged")

// plain says whether a batch's events need none of the steps between
// storing them and making their fulfilments: no reversal, refund or
// subscription among them, no purchase awaiting its items. Such a batch
// is written in one round trip (recordPlain).
func plain(keys []eventKey, groups map[eventKey][]*acceptCall, events []db.BatchEvent) bool {
	for i, k := range keys {
		ev, e := groups[k][0].ev, events[i]
		if sub, _ := ev.StartsSubscription(); sub != "" || ev.Invoice != nil || ev.Reversal != nil {
			return false
		}
		if e.Reversal != "" || e.Reverses != "" || e.RefundOf != "" || e.Ends != "" || e.Suspends != "" || e.Resumes != "" {
			return false
		}
		if e.Purchase != nil && e.Purchase.AwaitingItems != "" {
			return false
		}
	}
	return true
}

// recordPlain writes a plain batch in tx in one round trip, BEGIN and
// COMMIT included (db.RecordPlainBatch): the events with their
// purchases, the fulfilments of those stored new, the known ones counted.
// It makes the rows recordBatchTx's longer way makes, and answers each
// delivery as it does.
func (s *Service) recordPlain(ctx context.Context, tx pgx.Tx, keys []eventKey, groups map[eventKey][]*acceptCall, events []db.BatchEvent) error {
	actors := make([]string, len(keys))
	for i, k := range keys {
		if first := groups[k][0]; first.ev.Fulfils() {
			actors[i] = cmp.Or(first.ev.Origin, "intake")
		}
	}
	db.CommitWithNext(tx)
	stored, born, err := db.RecordPlainBatch(ctx, tx, events, actors, s.birth(createdReason))
	if err != nil {
		return err
	}
	created := map[int64][]db.Born{}
	for _, b := range born {
		created[b.EventPK] = append(created[b.EventPK], b)
	}
	answer(keys, groups, stored, created)
	return nil
}

// tookBack is what a batch's reversals moved: rows stopped, by the state
// they went to, and revocations made.
type tookBack struct {
	stopped  map[state.State][]string
	revoking []string
}
