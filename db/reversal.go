package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/state"
)

// Payment names one payment of one provider.
type Payment struct {
	Provider, PaymentID string
}

// paymentArrays splits payments into the two arrays the statements below
// filter on; nil arrays (no payments given) filter nothing.
func paymentArrays(payments []Payment) (providers, ids []string) {
	if payments == nil {
		return nil, nil
	}
	providers, ids = make([]string, len(payments)), make([]string, len(payments))
	for i, p := range payments {
		providers[i], ids[i] = p.Provider, p.PaymentID
	}
	return providers, ids
}

// Reversed reports whether a stored event takes the payment back (for at
// least one of its actions).
func Reversed(ctx context.Context, q DBTX, p Payment) (bool, error) {
	var reversed bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM guardian_reversals_of($1, $2))`, p.Provider, p.PaymentID).Scan(&reversed)
	return reversed, wrap("read reversal", err)
}

// MoveReversedPending moves every pending fulfilment (direction fulfil)
// whose payment a stored event reverses for its action (revokes names
// it), of the given payments (nil: of every
// payment) and actions (nil: of every action), to the state the domain names (cancelled, or
// needs_reconciliation to ask the receiver), with its reason, logging each
// move with the reversing event. Rows are locked in (provider, payment_id)
// order, the order every writer of a payment's rows takes. It returns the
// moved rows' ids.
func MoveReversedPending(ctx context.Context, q DBTX, actor string, payments []Payment, actions []string, to state.State, reason string) ([]string, error) {
	providers, ids := paymentArrays(payments)
	// A few payments' rows are found by the identity's index of the
	// payment, and each asks for its own reversals; so do a round's over
	// every payment, read from the moving rows alone (pendingRows). When
	// they are many beside the reversals stored (holdsMany), the round
	// joins them to every reversal at once (reversalsRead), in the
	// identity's order of the payment: from the moving rows, the planner
	// sorted them all for a merge with the reversals (270 against 147 ms
	// for 100,000 pending beside 25,000 reversals).
	pending, locked := weighed{`fulfilment_move s JOIN fulfilment_identity f ON f.id = s.id`, `s.state = 'pending' AND f.action = 'fulfil' AND NOT f.failed`}, "s"
	reversed := `EXISTS (SELECT 1 FROM guardian_reversals_of(f.provider, f.payment_id) r WHERE f.action_name = ANY(r.revokes))`
	if payments == nil {
		many, err := holdsMany(ctx, q, weighed{pendingRows.from, pendingRows.where + ` AND ($1::text[] IS NULL OR f.action_name = ANY($1))`}, actions)
		if err != nil {
			return nil, wrap("move reversed pending", err)
		}
		if many {
			reversed = `EXISTS (SELECT 1 FROM payment_reversal r WHERE r.provider = f.provider AND r.payment_id = f.payment_id AND f.action_name = ANY(r.revokes))`
		} else {
			pending, locked = pendingRows, "f"
		}
	}
	rows, err := q.Query(ctx, `
		WITH due AS (
			-- The moving rows alone are locked (migration 00050): the
			-- identities are never written here, so a row failing
			-- meanwhile, whose trigger writes its identity, waits on no
			-- lock of this statement.
			SELECT `+locked+`.id,
				(SELECT r.event_id FROM guardian_reversals_of(f.provider, f.payment_id) r
				 WHERE f.action_name = ANY(r.revokes) ORDER BY r.id LIMIT 1) AS reversed_by
			FROM `+pending.from+`
			WHERE `+pending.where+`
			  AND ($1::text[] IS NULL OR (f.provider, f.payment_id) IN (SELECT * FROM unnest($1::text[], $2::text[])))
			  AND `+reversed+`
			  AND ($6::text[] IS NULL OR f.action_name = ANY($6))
			ORDER BY f.provider, f.payment_id
			FOR UPDATE OF `+locked+`
		), moved AS (
			-- due's rows are pending and locked by this statement: joined
			-- by the primary key alone, whatever the statistics say of
			-- pending rows (with the state in the condition, an estimate
			-- of none pending joined each row through the state's index,
			-- reading every pending row for each). The guard refuses any
			-- other move.
			UPDATE fulfilment_move f SET state = $5 FROM due WHERE f.id = due.id
			RETURNING f.id, f.attempt, due.reversed_by
		), logged AS (
			INSERT INTO fulfilment_transition (fulfilment_id, from_state, to_state, attempt, actor, reason, evidence)
			SELECT id, 'pending', $5, attempt, $3, $4, jsonb_build_object('reversed_by', reversed_by) FROM moved
		)
		SELECT id FROM moved`, providers, ids, actor, reason, string(to), actions)
	if err != nil {
		return nil, wrap("move reversed pending", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return out, wrap("move reversed pending", err)
}

// pendingRows is every pending fulfilment (direction fulfil), read from
// fulfilment_move alone: the state's index finds them, and each carries
// its payment and action's name (migration 00051), so a round over a
// backlog that asks each row for its own reversals reads no identity. A
// pending row has not failed (a failed row is final). Joined to its
// identity, each pending row cost a read of it by id, a page at random
// in a table as large as the history.
var pendingRows = weighed{`fulfilment_move f`, `f.state = 'pending' AND f.action = 'fulfil'`}

// CreateRevocations creates a pending revocation (a fulfilment row with
// direction revoke) for each action of the given payments (nil: every
// payment) that is fulfilled, is taken back by a stored event (reverses
// the payment, revokes names the action), and has no revocation yet: one
// per (payment, action), ever, whatever number of refunds and disputes
// reverse it (a failed revocation, which the receiver declined, is an
// operator's to retry). Its event is the first event taking the action
// back; its key derives from the payment and action in the revoke
// namespace (guardian_action_revoke_key). Concurrent creators meet at the
// fulfilment_one_per_action index: one row. It returns the created rows' ids, each of which needs a dispatch
// job in the same transaction; reason is its first transition's.
//
// Every payment (nil) reads every reversing event: its cost grows with the
// history of refunds. CreateRevocationsSettledSince is the bounded form.
func CreateRevocations(ctx context.Context, q DBTX, actor, reason string, payments []Payment) ([]string, error) {
	if payments == nil {
		return createRevocations(ctx, q, actor, reason, fulfilledRows(`true`), everyReversal)
	}
	providers, ids := paymentArrays(payments)
	return createRevocations(ctx, q, actor, reason, fulfilledRows(`(f.provider, f.payment_id) IN (SELECT * FROM unnest($3::text[], $4::text[]))`),
		eachOnesReversals, providers, ids)
}

// The reversals createRevocations joins to the fulfilled rows it weighs
// (reversalsRead): every reversal at once, read from the view, for a round
// over every payment or the recently settled; each row's own, through
// guardian_reversals_of, for a few payments.
//
// reversalsRead: Postgres cannot pass a join's values into the view (a
// union whose parts filter or join), so a statement joined to it reads
// every reversal: once, hashed, which is the cheaper way for a round
// weighing thousands of rows (the sweep's window after a burst held 20,000
// at a million payments: 655 ms a round asking each row's own, 50 ms
// hashed); but for each row when it weighs a few, which took 15,016 rows
// to take back one payment beside 5,000 reversals (migration 00047,
// db.TestTakeBackReadsItsOwnReversals). The function is inlined with the
// payment as an index condition. A sweep's round chooses by how many rows
// it weighs beside how many reversals are stored (holdsMany).
const (
	everyReversal     = `JOIN payment_reversal r ON r.provider = f.provider AND r.payment_id = f.payment_id AND f.action_name = ANY(r.revokes)`
	eachOnesReversals = `CROSS JOIN LATERAL guardian_reversals_of(f.provider, f.payment_id) r`
)

// CreateRevocationsSettledSince is CreateRevocations for the payments whose
// fulfilment last moved (to fulfilled) at or after since: the ones a
// reversal may have missed while they were in flight or parked. It reads
// those fulfilments through the (state, updated_at) index, and their
// reversals as their number says (reversalsRead): each one's own unless
// the window holds many beside the reversals stored (holdsMany), so a
// quiet round costs what its window holds whatever the history; every
// reversal once, hashed, for a burst.
func CreateRevocationsSettledSince(ctx context.Context, q DBTX, actor, reason string, since time.Time) ([]string, error) {
	many, err := holdsMany(ctx, q, settledRows(`f.updated_at >= $1`), since)
	if err != nil {
		return nil, wrap("create revocations", err)
	}
	reversals := eachOnesReversals
	if many {
		reversals = everyReversal
	}
	return createRevocations(ctx, q, actor, reason, settledRows(`f.updated_at >= $3`), reversals, since)
}

// weighed is the rows a take-back round weighs, in its statement and in
// the count that chooses how it reads their reversals (holdsMany): the
// relation they are read from, as f, and the condition on them.
type weighed struct{ from, where string }

// fulfilled is a fulfilled row's condition, on columns the view and the
// moving row both have.
const fulfilled = `f.action = 'fulfil' AND f.state = 'fulfilled'`

// fulfilledRows is the fulfilled rows where scope holds, read through the
// view: a payment's are found by the identity's index of its payment
// (fulfilment_one_per_action, which holds the rows that have not failed,
// and serves only a statement that says so).
func fulfilledRows(scope string) weighed {
	return weighed{`fulfilment f`, fulfilled + ` AND NOT f.failed AND (` + scope + `)`}
}

// settledRows is the rows fulfilled where scope holds, of the moving rows'
// own columns, read from fulfilment_move alone: the state's index finds
// them, and each carries its payment and action's name (migration 00051).
// Through the view, the planner found the window's payments by probing,
// for every reversal stored, its payment's identity and then its moving
// row: 5.0 s a round at ten million payments. A fulfilled row has not
// failed.
func settledRows(scope string) weighed {
	return weighed{`fulfilment_move f`, fulfilled + ` AND (` + scope + `)`}
}

// fewRows is the most fulfilments a sweep's round asks one by one for
// their own reversals, however few reversals are stored; past it, it
// reads every reversal once, hashed, unless the reversals stored outnumber
// the rows it weighs rowsPerReversal times over (reversalsRead). A row's
// own reversals are an index probe that finds none for most (0.01 to
// 0.03 ms); every reversal read once is a read of their index alone
// (migration 00049), under 0.001 ms each whatever the history behind
// them (about 30 ms at ten million payments, 100,000 reversals), where
// each once cost a visit to its event's row (350 to 500 ms). With a fixed bound of
// fewRows, a new leader's rounds over a backlog of 5,000 pending took
// 1.2 s each at ten million payments.
const (
	fewRows         = 1000
	rowsPerReversal = 4
)

// holdsMany reports whether the fulfilments f meet where (its own
// parameters from $1) are many beside the reversals stored: more than
// fewRows, and more than a rowsPerReversal-th of the reversals, as the
// planner's statistics count them (the partial index of reversals, as
// VACUUM and ANALYZE leave it: none known, none counted). It counts no
// further than it must.
func holdsMany(ctx context.Context, q DBTX, rows weighed, args ...any) (bool, error) {
	var many bool
	err := q.QueryRow(ctx, fmt.Sprintf(`
		WITH bound AS (
			SELECT greatest(%d, (SELECT greatest(reltuples, 0) FROM pg_class WHERE oid = to_regclass('webhook_event_reversals'))::bigint / %d) AS n
		)
		SELECT count(*) > (SELECT n FROM bound) FROM (SELECT FROM %s WHERE %s LIMIT (SELECT n + 1 FROM bound)) w`,
		fewRows, rowsPerReversal, rows.from, rows.where), args...).Scan(&many)
	return many, err
}

// Serial plans the rest of tx's statements without parallel workers. A
// round of the sweep is background work, to be done in the fewest cycles
// rather than the least time: a parallel plan of the round over a burst
// built the hash of its window once in each of its three processes (a
// join Postgres does not share between them) and took 270 to 320 ms of
// two cores at ten million payments, where one process took 63 ms; the
// cycles it took were intake's and dispatch's.
func Serial(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `SET LOCAL max_parallel_workers_per_gather = 0`)
	return wrap("plan without parallel workers", err)
}

// TxTime is the transaction's own clock: now(), which stamps every row the
// transaction moves (updated_at).
func TxTime(ctx context.Context, q DBTX) (time.Time, error) {
	var t time.Time
	err := q.QueryRow(ctx, `SELECT now()`).Scan(&t)
	return t, wrap("transaction time", err)
}

// createRevocations is CreateRevocations over the fulfilled rows weighed
// ($3 on: their scope's own parameters), reading their reversals as
// reversals says (everyReversal or eachOnesReversals).
func createRevocations(ctx context.Context, q DBTX, actor, reason string, weigh weighed, reversals string, args ...any) ([]string, error) {
	rows, err := q.Query(ctx, `
		WITH due AS (
			SELECT DISTINCT ON (f.provider, f.payment_id, f.action_name) f.provider, f.payment_id, f.action_name, r.id AS event_pk
			FROM `+weigh.from+` `+reversals+`
			WHERE `+weigh.where+` AND f.action_name = ANY(r.revokes)
			  -- Each half through its partial index: never a scan of the table.
			  AND NOT EXISTS (SELECT 1 FROM fulfilment_identity v WHERE v.provider = f.provider AND v.payment_id = f.payment_id
				AND v.action_name = f.action_name AND v.action = 'revoke' AND NOT v.failed)
			  AND NOT EXISTS (SELECT 1 FROM fulfilment_identity v WHERE v.provider = f.provider AND v.payment_id = f.payment_id
				AND v.action_name = f.action_name AND v.action = 'revoke' AND v.failed)
			ORDER BY f.provider, f.payment_id, f.action_name, r.id
		), created AS (
			INSERT INTO fulfilment_identity (event_pk, provider, payment_id, action_name, idempotency_key, action)
			SELECT event_pk, provider, payment_id, action_name, guardian_action_revoke_key(provider, payment_id, action_name, 0), 'revoke'
			FROM due ORDER BY provider, payment_id, action_name
			ON CONFLICT (provider, payment_id, action_name, action) WHERE NOT failed DO NOTHING
			RETURNING id, created_at, action, provider, payment_id, action_name
		), moving AS (
			INSERT INTO fulfilment_move (id, created_at, action, provider, payment_id, action_name)
			SELECT id, created_at, action, provider, payment_id, action_name FROM created
		), logged AS (
			INSERT INTO fulfilment_transition (fulfilment_id, from_state, to_state, attempt, actor, reason)
			SELECT id, NULL, 'pending', 0, $1, $2 FROM created
		)
		SELECT id FROM created`, append([]any{actor, reason}, args...)...)
	if err != nil {
		return nil, wrap("create revocations", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return out, wrap("create revocations", err)
}

// RetryRevocation makes a new pending revocation for the payment and
// action of a failed one (the receiver declined its key: nothing was taken
// back), under the action's next revoke key, if the action is still
// fulfilled and nothing else holds its revocation. It returns the new row's id, or ""
// when nothing was created.
func RetryRevocation(ctx context.Context, q DBTX, failed Fulfilment, actor, reason string) (string, error) {
	var id string
	err := q.QueryRow(ctx, `
		WITH created AS (
			INSERT INTO fulfilment_identity (event_pk, provider, payment_id, action_name, idempotency_key, action)
			SELECT $1::bigint, $2::text, $3::text, $6::text, guardian_action_revoke_key($2, $3, $6,
				(SELECT count(*) FROM fulfilment_identity p WHERE p.provider = $2 AND p.payment_id = $3 AND p.action_name = $6
					AND p.action = 'revoke' AND p.failed)), 'revoke'
			WHERE EXISTS (SELECT 1 FROM fulfilment f WHERE f.provider = $2 AND f.payment_id = $3 AND f.action_name = $6
				AND f.action = 'fulfil' AND NOT f.failed AND f.state = 'fulfilled')
			ON CONFLICT (provider, payment_id, action_name, action) WHERE NOT failed DO NOTHING
			RETURNING id, created_at, action, provider, payment_id, action_name
		), moving AS (
			INSERT INTO fulfilment_move (id, created_at, action, provider, payment_id, action_name)
			SELECT id, created_at, action, provider, payment_id, action_name FROM created
		), logged AS (
			INSERT INTO fulfilment_transition (fulfilment_id, from_state, to_state, attempt, actor, reason)
			SELECT id, NULL, 'pending', 0, $4, $5 FROM created
		)
		SELECT id FROM created`, failed.EventPK, failed.Provider, failed.PaymentID, actor, reason, failed.ActionName).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return id, wrap("retry revocation", err)
}

// TakeBackWindow reads where the sweep's revocation catch-all stands: the
// transaction times of its last round and of its last full round, both
// zero before the first.
func TakeBackWindow(ctx context.Context, q DBTX) (last, lastFull time.Time, err error) {
	err = q.QueryRow(ctx, `SELECT last, last_full FROM take_back_window`).Scan(&last, &lastFull)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, time.Time{}, nil
	}
	return last, lastFull, wrap("read take-back window", err)
}

// SetTakeBackWindow records a round of the catch-all, in the transaction
// that made it.
func SetTakeBackWindow(ctx context.Context, q DBTX, last, lastFull time.Time) error {
	_, err := q.Exec(ctx, `INSERT INTO take_back_window (last, last_full) VALUES ($1, $2)
		ON CONFLICT (one) DO UPDATE SET last = excluded.last, last_full = excluded.last_full`, last, lastFull)
	return wrap("record take-back window", err)
}

// RefundShare is a stored refund whose share of its payment is not decided
// yet (webhook_event.refund_of), beside what the payment's first paying
// event with an amount says was paid (Paid nil: no such event yet).
type RefundShare struct {
	EventPK    int64
	Payment    Payment
	RefundID   string
	Amount     Amount
	Cumulative bool
	Paid       *Amount
}

// LockPayments takes a transaction-scoped lock on each payment, in
// (provider, payment_id) order, so that two transactions weighing the same
// payment's refunds run one after the other: the second's next statement
// sees the first's refund. Only refunds whose share is undecided take it.
func LockPayments(ctx context.Context, q DBTX, payments []Payment) error {
	providers, ids := paymentArrays(payments)
	_, err := q.Exec(ctx, `
		SELECT pg_advisory_xact_lock(hashtextextended(p || ':' || pay, 0))
		FROM (SELECT DISTINCT p, pay FROM unnest($1::text[], $2::text[]) AS u(p, pay) ORDER BY p, pay) u`, providers, ids)
	return wrap("lock payments", err)
}

// RefundShares lists the undecided refunds of the given payments with the
// payments' amounts paid, in (provider, payment_id, event) order.
func RefundShares(ctx context.Context, q DBTX, payments []Payment) ([]RefundShare, error) {
	providers, ids := paymentArrays(payments)
	rows, err := q.Query(ctx, `
		SELECT r.id, r.provider, r.refund_of, coalesce(r.refund_id, ''), r.amount, r.currency, r.refund_cumulative, paid.amount, paid.currency
		FROM (SELECT DISTINCT p, pay FROM unnest($1::text[], $2::text[]) AS u(p, pay)) u
		JOIN webhook_event r ON r.provider = u.p AND r.refund_of = u.pay
		LEFT JOIN LATERAL (
			SELECT e.amount, e.currency FROM webhook_event e
			WHERE e.provider = r.provider AND e.payment_id = r.refund_of AND e.amount IS NOT NULL
			ORDER BY e.id LIMIT 1) paid ON true
		ORDER BY r.provider, r.refund_of, r.id`, providers, ids)
	if err != nil {
		return nil, wrap("read refund shares", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RefundShare, error) {
		var s RefundShare
		var paid *int64
		var paidCurrency *string
		err := row.Scan(&s.EventPK, &s.Payment.Provider, &s.Payment.PaymentID, &s.RefundID, &s.Amount.Minor, &s.Amount.Currency, &s.Cumulative, &paid, &paidCurrency)
		if paid != nil && paidCurrency != nil {
			s.Paid = &Amount{Minor: *paid, Currency: *paidCurrency}
		}
		return s, err
	})
	return out, wrap("read refund shares", err)
}

// MarkWholeRefunds records that the given payments' undecided refunds
// returned them whole: each such refund now reverses its payment
// (reverses, with reversal described as whole) for the actions revokes
// names beside those it already took back, and is no longer undecided. With no action taken back for a
// whole refund, the refunds are decided and reverse nothing.
func MarkWholeRefunds(ctx context.Context, q DBTX, payments []Payment, reversal string, revokes []string) error {
	providers, ids := paymentArrays(payments)
	_, err := q.Exec(ctx, `
		UPDATE webhook_event r SET reverses = CASE WHEN cardinality(coalesce(r.revokes, '{}') || $4::text[]) > 0 THEN r.refund_of END,
			reversal = $3, refund_of = NULL,
			-- A refund that already took back actions whose policy takes
			-- any refund keeps them beside those of a whole one.
			revokes = (SELECT array_agg(DISTINCT x ORDER BY x) FROM unnest(coalesce(r.revokes, '{}') || $4::text[]) AS x)
		FROM unnest($1::text[], $2::text[]) AS u(p, pay)
		WHERE r.provider = u.p AND r.refund_of = u.pay`, providers, ids, reversal, revokes)
	return wrap("mark whole refunds", err)
}
