package db

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/guardian-pay/guardian/app/state"
)

// errBatchLost means an event of a batch was neither inserted nor found:
// deleted meanwhile. The batch's transaction must not commit.
var errBatchLost = errors.New("an event of the batch was neither stored nor found")

// BatchEvent is one event of a batch: its delivery count is how many
// deliveries of it the batch carries.
type BatchEvent struct {
	EventParams
	Deliveries int
	// Purchase, when set, is recorded (as RecordPurchases would) if the
	// event is stored new: a paying event's purchase, in the statement
	// that stores it.
	Purchase *PurchaseRecord
}

// BatchEventResult is what InsertEvents did with one event.
type BatchEventResult struct {
	ID       int64
	Inserted bool
	// RefundsPending says an inserted paying event's payment has refunds
	// whose share is not decided yet (EventParams.RefundOf): stored
	// before the payment's paid event, they are weighed now.
	RefundsPending bool
	// Awaiting says the event's Purchase was recorded awaiting its items:
	// the caller enqueues their fetch in the same transaction.
	Awaiting bool
}

// InsertEvents stores a batch of events in two set-based statements: the
// new ones inserted with the purchases of those that carry one, the known
// ones counted (deliveries and last_seen_at).
// Events must be distinct by (provider, event_id) and sorted by it, so
// concurrent batches take their row locks in one order and cannot deadlock.
// Results are in the order of events.
func InsertEvents(ctx context.Context, q DBTX, events []BatchEvent) ([]BatchEventResult, error) {
	n := len(events)
	c := newEventCollector(events)
	rows, err := q.Query(ctx, insertEventsSQL, eventArgs(events)...)
	if err := c.collect("insert events", true, rows, err); err != nil {
		return nil, err
	}
	c.markAwaiting(events)
	if c.found == n {
		return c.out, nil
	}
	var dp, de []string
	var dn []int32
	for i, e := range events {
		if c.out[i].ID == 0 {
			dp, de, dn = append(dp, e.Provider), append(de, e.EventID), append(dn, int32(e.Deliveries))
		}
	}
	rows, err = q.Query(ctx, countDuplicatesSQL, dp, de, dn)
	if err := c.collect("count duplicate deliveries", false, rows, err); err != nil {
		return nil, err
	}
	if c.found != n {
		return nil, wrap("insert events", errBatchLost)
	}
	return c.out, nil
}

// eventArgs are insertEventsSQL's arguments for events.
func eventArgs(events []BatchEvent) []any {
	n := len(events)
	providers, ids, types, payments, origins, unmapped, deliveryIDs := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	reversals, reverses, revokes, ends := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	suspends, resumes := make([]string, n), make([]string, n)
	amounts, currencies, refundOf, refundIDs, cumulative := make([]*int64, n), make([]string, n), make([]string, n), make([]string, n), make([]bool, n)
	bodies, counts := make([][]byte, n), make([]int32, n)
	for i, e := range events {
		providers[i], ids[i], types[i], payments[i], origins[i], unmapped[i], deliveryIDs[i] = e.Provider, e.EventID, e.Type, e.PaymentID, e.Origin, e.Unmapped, e.DeliveryID
		bodies[i], counts[i] = e.Payload, int32(e.Deliveries)
		reversals[i], reverses[i], revokes[i], ends[i] = e.Reversal, e.Reverses, strings.Join(e.Revokes, ","), e.Ends
		suspends[i], resumes[i] = e.Suspends, e.Resumes
		if e.Amount != nil {
			amounts[i], currencies[i] = &e.Amount.Minor, e.Amount.Currency
		}
		refundOf[i], refundIDs[i], cumulative[i] = e.RefundOf, e.RefundID, e.RefundCumulative
	}
	// The purchases, each beside the event that carries it.
	var purchases []PurchaseRecord
	var purchaseOf []string
	for _, e := range events {
		if e.Purchase != nil {
			purchases, purchaseOf = append(purchases, *e.Purchase), append(purchaseOf, e.EventID)
		}
	}
	return append([]any{providers, ids, types, payments, bodies, origins, counts, unmapped, deliveryIDs, reversals, reverses,
		amounts, currencies, refundOf, refundIDs, cumulative, revokes, ends, suspends, resumes},
		append(purchaseColumns(purchases), purchaseOf)...)
}

// insertEventsSQL inserts a batch's new events with the purchases they
// carry, returning each event stored (id, provider, event id, whether its
// payment has refunds pending, NULL) and each purchase recorded awaiting
// its items (0, provider, an empty event id, false, payment).
var insertEventsSQL = `
		WITH stored AS (
			INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body, origin, deliveries, unmapped, delivery_id, reversal, reverses,
				amount, currency, refund_of, refund_id, refund_cumulative, revokes, ends, suspends, resumes)
			SELECT p, e, t, NULLIF(pay, ''), b, coalesce(NULLIF(o, ''), 'webhook'), n, NULLIF(um, ''), NULLIF(d, ''), NULLIF(rv, ''), NULLIF(rp, ''),
				am, NULLIF(cur, ''), NULLIF(rof, ''), NULLIF(rid, ''), cml, string_to_array(NULLIF(rk, ''), ','), NULLIF(en, ''), NULLIF(su, ''), NULLIF(re, '')
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::text[], $7::int[], $8::text[], $9::text[], $10::text[], $11::text[],
				$12::bigint[], $13::text[], $14::text[], $15::text[], $16::boolean[], $17::text[], $18::text[], $19::text[], $20::text[])
				WITH ORDINALITY AS u(p, e, t, pay, b, o, n, um, d, rv, rp, am, cur, rof, rid, cml, rk, en, su, re, ord)
			ORDER BY ord
			ON CONFLICT (provider, event_id) DO NOTHING
			RETURNING id, provider, event_id, payment_id IS NOT NULL AND EXISTS (
				SELECT 1 FROM webhook_event r WHERE r.provider = webhook_event.provider AND r.refund_of = webhook_event.payment_id) AS refunds_pending
		), bought AS (` + purchaseInsert(`unnest($21::text[], $22::text[], $23::text[], $24::text[], $25::text[], $26::text[], $27::timestamptz[], $28::text[])
				WITH ORDINALITY AS u(p, pay, a, r, d, w, at, ev, ord)
				-- Only an event stored now records its purchase.
				JOIN stored ON stored.provider = u.p AND stored.event_id = u.ev`) + `
		)
		SELECT id, provider, event_id, refunds_pending, NULL FROM stored
		UNION ALL
		SELECT 0, provider, '', false, payment_id FROM bought WHERE awaiting_items IS NOT NULL`

// countDuplicates is the statement that counts the deliveries of known
// events, given as (provider, event id, deliveries) arrays, returning each
// as insertEventsSQL returns an event; where, if set, is a further
// condition on the known row w. It locks the known rows in key order
// before counting them. FOR NO KEY UPDATE, the lock the counting UPDATE
// takes anyway: it does not conflict with the FOR KEY SHARE a foreign-key
// check takes on the event, so a batch counting a duplicate never waits
// on (or deadlocks with) a transaction creating a fulfilment for that
// event, such as an operator's retry (FOR UPDATE did: Postgres answered
// 40P01).
func countDuplicates(where string) string {
	return `
		WITH u AS (SELECT * FROM unnest($1::text[], $2::text[], $3::int[]) AS u(p, e, n)),
		locked AS (
			SELECT w.id, u.n FROM webhook_event w JOIN u ON w.provider = u.p AND w.event_id = u.e` + where + `
			ORDER BY w.provider, w.event_id
			FOR NO KEY UPDATE OF w
		)
		UPDATE webhook_event w SET deliveries = w.deliveries + locked.n, last_seen_at = now()
		FROM locked WHERE w.id = locked.id
		RETURNING w.id, w.provider, w.event_id, false, NULL::text`
}

var countDuplicatesSQL = countDuplicates("")

// eventCollector gathers what the statements storing a batch's events
// return into the batch's results, in the order of its events.
type eventCollector struct {
	out      []BatchEventResult
	index    map[[2]string]int
	found    int
	awaiting [][2]string
}

func newEventCollector(events []BatchEvent) *eventCollector {
	c := &eventCollector{out: make([]BatchEventResult, len(events)), index: make(map[[2]string]int, len(events))}
	for i, e := range events {
		c.index[[2]string{e.Provider, e.EventID}] = i
	}
	return c
}

// collect reads rows (from a statement that returned err) into the
// results: each an event stored (inserted says whether new) or a purchase
// recorded awaiting its items.
func (c *eventCollector) collect(op string, inserted bool, rows pgx.Rows, err error) error {
	if err != nil {
		return wrap(op, err)
	}
	defer rows.Close()
	for rows.Next() {
		r := BatchEventResult{Inserted: inserted}
		var provider, eventID string
		var awaits *string
		if err := rows.Scan(&r.ID, &provider, &eventID, &r.RefundsPending, &awaits); err != nil {
			return wrap(op, err)
		}
		if awaits != nil {
			c.awaiting = append(c.awaiting, [2]string{provider, *awaits})
			continue
		}
		c.out[c.index[[2]string{provider, eventID}]] = r
		c.found++
	}
	return wrap(op, rows.Err())
}

// markAwaiting sets Awaiting on the event whose purchase was recorded
// awaiting its items: its payment's first stored event's.
func (c *eventCollector) markAwaiting(events []BatchEvent) {
	for _, a := range c.awaiting {
		for i, e := range events {
			if e.Purchase != nil && c.out[i].Inserted && e.Provider == a[0] && e.Purchase.PaymentID == a[1] {
				c.out[i].Awaiting = true
				break
			}
		}
	}
}

// ErrNotPlain means a batch sent to RecordPlainBatch met, in its rows,
// what only the longer path decides; nothing of it was committed, and
// the caller writes it again that way.
var ErrNotPlain = errors.New("the batch needs the longer path: refunds stored before a payment's paid event are weighed first")

// notPlainCode is guardian_require's SQLSTATE (migration 00048).
const notPlainCode = "GX001"

// RecordPlainBatch stores a batch of plain events (no reversal, refund,
// subscription link or purchase awaiting its items: the caller's to
// decide) and makes the fulfilments of those stored new whose actor is
// set (actors, in the order of events; "" for an event that fulfils
// nothing), in one round trip: what InsertEvents and InsertFulfilments
// do in three, and in the same rows. Its statements (the plan setting,
// the events, the fulfilments, the known ones counted) go in one pgx
// batch; in a transaction of InPipelinedTx with CommitWithNext set, the
// BEGIN and COMMIT go with them.
//
// The fulfilments' statement cannot be told which events are new, so it
// reads them: the rows of the batch's events this transaction wrote
// (storedHere), which before it is the events' insert alone. The known
// ones are counted after it, chosen the same way. An event new here whose
// payment has refunds stored before it fails the events' statement, and
// the transaction with it (ErrNotPlain): the longer path weighs them
// before any fulfilment is made.
//
// Events must be distinct by (provider, event_id) and sorted by it, as
// for InsertEvents. An event neither stored nor found (deleted meanwhile)
// has a zero ID in the results: the rest of the batch was committed, and
// its delivery must not be acknowledged.
func RecordPlainBatch(ctx context.Context, tx pgx.Tx, events []BatchEvent, actors []string, birth Birth) ([]BatchEventResult, []Born, error) {
	c := newEventCollector(events)
	var fp, fe, fa, dp, de []string
	var dn []int32
	for i, e := range events {
		if actors[i] != "" {
			fp, fe, fa = append(fp, e.Provider), append(fe, e.EventID), append(fa, actors[i])
		}
		dp, de, dn = append(dp, e.Provider), append(de, e.EventID), append(dn, int32(e.Deliveries))
	}
	b := &pgx.Batch{}
	// Each statement's plan is made once per connection, for any batch's
	// size. Left to choose, Postgres planned the fulfilments' statement
	// anew on every run of a batch of one, because its plan for one row
	// costs less than one for any number; the planning cost more than the
	// statements (intake at one delivery at a time: 266 against 472/s).
	b.Queue(`SET LOCAL plan_cache_mode = force_generic_plan`)
	b.Queue(plainEventsSQL, eventArgs(events)...)
	if len(fp) > 0 {
		b.Queue(plainFulfilmentsSQL, fulfilmentArgs(fp, fa, fe, birth)...)
	}
	b.Queue(plainDuplicatesSQL, dp, de, dn)
	br := tx.SendBatch(ctx, b)
	_, err := br.Exec()
	var rows pgx.Rows
	if err == nil {
		rows, err = br.Query()
		err = c.collect("insert events", true, rows, err)
	}
	var born []Born
	if err == nil && len(fp) > 0 {
		if rows, err = br.Query(); err == nil {
			born, err = collectBorn(rows)
		}
		err = wrap("insert fulfilments", err)
	}
	if err == nil {
		rows, err = br.Query()
		err = c.collect("count duplicate deliveries", false, rows, err)
	}
	if cerr := br.Close(); err == nil {
		err = wrap("commit", cerr)
	}
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == notPlainCode {
		return nil, nil, ErrNotPlain
	}
	if err != nil {
		return nil, nil, err
	}
	return c.out, born, nil
}

// plainEventsSQL is insertEventsSQL failing on a new event whose payment
// has refunds stored before it (RecordPlainBatch).
var plainEventsSQL = strings.Replace(insertEventsSQL, "SELECT id, provider, event_id, refunds_pending, NULL FROM stored",
	"SELECT id, provider, event_id, NOT guardian_require(NOT refunds_pending, 'refunds stored before the payment''s paid event'), NULL FROM stored", 1)

// plainFulfilmentsSQL makes the fulfilments of the events, given as
// provider ($1), event id ($6) and actor ($2), that this transaction
// stored (RecordPlainBatch).
var plainFulfilmentsSQL = insertFulfilments(`
			SELECT e.id AS event_pk, k.actor, ''::text AS only_action, k.ord
			FROM unnest($1::text[], $6::text[], $2::text[]) WITH ORDINALITY AS k(p, ev, actor, ord)
				JOIN webhook_event e ON e.provider = k.p AND e.event_id = k.ev
			WHERE `+storedHere("e"), "")

// plainDuplicatesSQL counts the deliveries of the events of a batch that
// this transaction did not store (RecordPlainBatch).
var plainDuplicatesSQL = countDuplicates(`
			WHERE NOT ` + storedHere("w"))

// storedHere says that the event row r was written by this transaction:
// its xmin is the transaction's id, and it was first seen at the
// transaction's start. The second rules out a row frozen long ago whose
// xmin, 2^32 transactions old, has come round to the same number.
func storedHere(r string) string {
	return "(" + r + ".xmin = pg_current_xact_id()::xid AND " + r + ".first_seen_at = now())"
}

// BatchFulfilment is one fulfilment a batch would create: for a stored
// event whose type fulfils a payment.
type BatchFulfilment struct {
	EventPK int64
	Actor   string
	// Action, when set, makes only that action's row (an operator's retry
	// of one failed action); empty makes one for each action of the
	// payment's purchase that has none that holds it.
	Action string
}

// Birth says how InsertFulfilments makes its rows. The domain decides
// both states and reasons; db writes them.
type Birth struct {
	// Reason is the first transition's reason of a row born pending.
	Reason string
	// Reversed is the state a fulfilment of an action already taken back
	// is born in (state.NeedsReconciliation: whether the receiver acted
	// under the action's key is a fact to ask), with ReversedReason as
	// its first transition's reason, for the actions named in Asks (those
	// with a lookup); an action taken back and not in Asks gets no row.
	Reversed       state.State
	ReversedReason string
	Asks           []string
	// Jobs, when its queue is set, is how the dispatch job of each row
	// born pending is written: in the statement that makes the row, so
	// an intake batch's jobs cost no round trip of their own. With no
	// queue, no job is written (the caller's to insert). No statement
	// that makes rows notifies River's workers of its jobs: the caller
	// does once it has committed (NotifyJobs).
	Jobs DispatchJobs
}

// Born is a fulfilment InsertFulfilments made: its id, its event and
// action, and the state it was born in (a pending one needs a dispatch job
// in the same transaction).
type Born struct {
	ID      string
	EventPK int64
	Action  string
	State   state.State
}

// InsertFulfilments creates, in one statement, a fulfilment with its first
// transition for each item and each action of its payment's purchase
// (RecordPurchases; a payment routed before actions existed has the one
// action "fulfil") that has no row that holds it (invariant 1 per action,
// the fulfilment_one_per_action index; of two items of one payment the
// first wins): pending, or for an action already taken back (a stored
// event reverses the payment and names the action in revokes) what
// birth.Reversed says. The provider and payment are copied from the event
// row, so every fulfilment of an event carries its payment. Rows go in in
// (provider, payment_id, action) order, so concurrent batches take the
// index in one order and cannot deadlock. It returns the created
// fulfilments in that order.
//
// Each row's Idempotency-Key derives from its payment, its action and the
// number of the action's failed (declined) fulfilments
// (guardian_action_key), so the same payment names the same keys in a
// restored database or a second deployment.
func InsertFulfilments(ctx context.Context, q DBTX, items []BatchFulfilment, birth Birth) ([]Born, error) {
	n := len(items)
	pks, actors, only := make([]int64, n), make([]string, n), make([]string, n)
	for i, it := range items {
		pks[i], actors[i], only[i] = it.EventPK, it.Actor, it.Action
	}
	rows, err := q.Query(ctx, insertFulfilmentsSQL, fulfilmentArgs(pks, actors, only, birth)...)
	if err != nil {
		return nil, wrap("insert fulfilments", err)
	}
	out, err := collectBorn(rows)
	return out, wrap("insert fulfilments", err)
}

// fulfilmentArgs are insertFulfilments' arguments: $1, $2 and $6 are
// its items' (insertFulfilmentsSQL: event keys, actors, actions), the
// rest the birth's.
func fulfilmentArgs(items, actors, only any, birth Birth) []any {
	return []any{items, actors, birth.Reason, string(birth.Reversed), birth.ReversedReason, only, birth.Asks,
		birth.Jobs.IDArg, birth.Jobs.Kind, birth.Jobs.Queue, birth.Jobs.Priority, birth.Jobs.MaxAttempts}
}

// collectBorn reads insertFulfilments' rows.
func collectBorn(rows pgx.Rows) ([]Born, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Born, error) {
		var b Born
		err := r.Scan(&b.ID, &b.EventPK, &b.Action, &b.State)
		return b, err
	})
}

// insertFulfilmentsSQL is InsertFulfilments' statement: its items are
// event pks ($1), actors ($2) and actions ($6).
var insertFulfilmentsSQL = insertFulfilments(`
			SELECT * FROM unnest($1::bigint[], $2::text[], $6::text[]) WITH ORDINALITY AS u(event_pk, actor, only_action, ord)`,
	"e.id = ANY($1) AND ")

// insertFulfilments is the statement that makes fulfilments (see
// InsertFulfilments) for the items u lists as (event_pk, actor,
// only_action, ord); chosen, if set, is a further condition on their
// events e, ending in AND.
func insertFulfilments(u, chosen string) string {
	return `
		WITH u AS (` + u + `
		), due AS (
			-- declined, the action's fulfilments the receiver declined, is
			-- the key's input: counted here and passed as a column, so the
			-- key's function is inlined (an argument that is a subquery,
			-- used twice in its body, made Postgres call it per row).
			SELECT e.id, e.provider, e.payment_id, a.action_name, u.ord, rv.reversed,
				(SELECT count(*) FROM fulfilment_identity p WHERE p.provider = e.provider AND p.payment_id = e.payment_id
					AND p.failed AND p.action = 'fulfil' AND p.action_name = a.action_name) AS declined
			FROM u JOIN webhook_event e ON e.id = u.event_pk
				LEFT JOIN purchase p ON p.provider = e.provider AND p.payment_id = e.payment_id
				CROSS JOIN LATERAL unnest(coalesce(p.actions, '{fulfil}')) AS a(action_name)
				-- OFFSET 0 keeps the subquery whole, asked once a row:
				-- flattened, its EXISTS was copied into each place that
				-- reads reversed, and each copy read the reversals again.
				CROSS JOIN LATERAL (SELECT EXISTS (
					SELECT 1 FROM guardian_reversals_of(e.provider, e.payment_id) r
					WHERE a.action_name = ANY(r.revokes)) AS reversed OFFSET 0) rv
			WHERE ` + chosen + `e.payment_id IS NOT NULL
				AND (u.only_action = '' OR u.only_action = a.action_name)
				-- An action already taken back is born as the domain says,
				-- or not at all.
				AND (NOT rv.reversed OR ($4 <> '' AND a.action_name = ANY($7::text[])))
				-- Nor is one from a body pruned after the payload retention
				-- (the lock waits out a prune in progress, then reads its
				-- result: db.Store.PruneEventBodies).
				AND e.pruned_at IS NULL
			FOR KEY SHARE OF e
		), made AS (
			INSERT INTO fulfilment_identity (event_pk, provider, payment_id, action_name, idempotency_key)
			SELECT id, provider, payment_id, action_name, guardian_action_key(provider, payment_id, action_name, declined)
			FROM due
			ORDER BY provider, payment_id, action_name, ord
			ON CONFLICT (provider, payment_id, action_name, action) WHERE NOT failed DO NOTHING
			RETURNING id, event_pk, action_name, created_at, action, provider, payment_id
		), moving AS (
			-- Each identity made gets its moving state (migration 00050).
			INSERT INTO fulfilment_move (id, state, created_at, action, provider, payment_id, action_name)
			SELECT made.id, CASE WHEN EXISTS (SELECT 1 FROM due WHERE due.id = made.event_pk
					AND due.action_name = made.action_name AND due.reversed) THEN $4 ELSE 'pending' END,
				made.created_at, made.action, made.provider, made.payment_id, made.action_name
			FROM made
			RETURNING id, state
		), created AS (
			SELECT made.id, made.event_pk, made.action_name, moving.state, made.provider, made.payment_id
			FROM made JOIN moving USING (id)
		), logged AS (
			INSERT INTO fulfilment_transition (fulfilment_id, from_state, to_state, attempt, actor, reason)
			SELECT created.id, NULL, created.state, 0, u.actor, CASE WHEN created.state = 'pending' THEN $3 ELSE $5 END
			FROM created JOIN u USING (event_pk)
		), queued AS (
			-- River's row, as its insert writes it (jobs.TestDispatchJobsAreRiversOwn).
			INSERT INTO river_job (args, kind, queue, priority, max_attempts, state, scheduled_at, tags, metadata)
			SELECT jsonb_build_object($8::text, created.id), $9, $10, $11, $12, 'available', now(), '{}', '{}'
			FROM created WHERE created.state = 'pending' AND $10 <> ''
			ORDER BY created.id
		)
		SELECT id, event_pk, action_name, state FROM created ORDER BY provider, payment_id, action_name`
}
