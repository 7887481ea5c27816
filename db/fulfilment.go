package db

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/state"
)

// Fulfilment is one payment's external action and where it stands.
type Fulfilment struct {
	ID           string
	EventPK      int64
	Provider     string
	PaymentID    string
	State        state.State
	Attempt      int
	CreatedAt    time.Time
	UpdatedAt    time.Time
	DispatchedAt *time.Time
	// Checks counts the reconciler's lookups since the row was last parked;
	// NextCheckAt is when the next is due (nil: once the grace has passed).
	Checks      int
	NextCheckAt *time.Time
	// Key is the Idempotency-Key every attempt is sent under: derived from
	// the payment (guardian_idempotency_key in the migrations), or, for rows
	// made before keys were derived, the row's id.
	Key string
	// Deadline is when the current attempt's call can no longer be in
	// flight, by the claimant's connector timeout (nil before the first
	// claim, and for claims made before deadlines were stored).
	Deadline *time.Time
	// Action is what the row does at the receiver: state.Fulfil, or
	// state.Revoke (taking back a payment a refund or dispute reversed).
	Action state.Action
	// ActionName is the action of the purchase the row performs
	// (app/actions): "fulfil" for a deployment without an actions file and
	// for every row made before actions existed.
	ActionName string
	// ClaimToken is the token of the Dispatch call that made the current
	// claim (ClaimParams.Token); nil before the first claim, and for claims
	// made before tokens were stored (migration 00034).
	ClaimToken *string
	// CallOutcome is the outcome of the current attempt's call as
	// recorded (TransitionParams.Outcome, migration 00037); nil before a
	// call's outcome is recorded for the attempt, as when the sweep or a
	// retried job parked it without one.
	CallOutcome *state.Outcome
}

const fulfilmentColumns = `id, event_pk, provider, payment_id, state, attempt, created_at, updated_at, dispatched_at, checks, next_check_at, idempotency_key, deadline, action, claim_token, call_outcome, action_name`

// A fulfilment is two rows under one id (migration 00050): its identity
// (fulfilment_identity), written once, and its moving state
// (fulfilment_move), which every move updates. The view fulfilment joins
// them for readers; a statement that moves rows updates fulfilment_move
// and reads the identity beside it, and fulfilmentOf names
// fulfilmentColumns from the two as it aliases them.
var movingColumns = map[string]bool{"state": true, "attempt": true, "updated_at": true, "dispatched_at": true,
	"checks": true, "next_check_at": true, "deadline": true, "claim_token": true, "claimant": true, "call_outcome": true}

// fulfilmentOf is fulfilmentColumns, each taken from identity or move, the
// aliases of the two tables.
func fulfilmentOf(identity, move string) string {
	parts := strings.Split(fulfilmentColumns, ", ")
	for i, c := range parts {
		if movingColumns[c] {
			parts[i] = move + "." + c
		} else {
			parts[i] = identity + "." + c
		}
	}
	return strings.Join(parts, ", ")
}

// scanFulfilment reads fulfilmentColumns, then any columns after them into
// extra.
func scanFulfilment(row pgx.Row, extra ...any) (Fulfilment, error) {
	var f Fulfilment
	err := row.Scan(append(f.fields(), extra...)...)
	return f, err
}

// fields are the scan targets of fulfilmentColumns, in order.
func (f *Fulfilment) fields() []any {
	return []any{&f.ID, &f.EventPK, &f.Provider, &f.PaymentID, &f.State, &f.Attempt, &f.CreatedAt, &f.UpdatedAt, &f.DispatchedAt, &f.Checks, &f.NextCheckAt, &f.Key, &f.Deadline, &f.Action, &f.ClaimToken, &f.CallOutcome, &f.ActionName}
}

// InsertFulfilment records a pending fulfilment for a newly stored event,
// with its first transition: InsertFulfilments for one event, making none
// for a payment already taken back. When the payment already has a live
// fulfilment (any state but failed) nothing is written and inserted is
// false: invariant 1, enforced by the fulfilment_one_per_action index on
// the identities that have not failed (cancelled holds its payment, failed
// frees it; migration 00050).
func InsertFulfilment(ctx context.Context, q DBTX, eventPK int64, actor, reason string) (id string, inserted bool, err error) {
	created, err := InsertFulfilments(ctx, q, []BatchFulfilment{{EventPK: eventPK, Actor: actor}}, Birth{Reason: reason})
	if err != nil {
		return "", false, err
	}
	if len(created) == 0 {
		return "", false, nil
	}
	return created[0].ID, true, nil
}

// GetFulfilment returns one fulfilment by id.
func GetFulfilment(ctx context.Context, q DBTX, id string) (Fulfilment, error) {
	f, err := scanFulfilment(q.QueryRow(ctx, `SELECT `+fulfilmentColumns+` FROM fulfilment WHERE id = $1`, id))
	return f, wrap("get fulfilment", err)
}

// FulfilmentsByPayment returns every fulfilment of one payment, oldest
// first. The payment's rows are indexed in two halves, the failed ones
// (fulfilment_payment_failed) and the rest (fulfilment_one_per_action),
// and a statement that names neither half can use neither index: it read
// the whole table, 140 ms for each fulfilment page at a million payments.
// So each half is asked for by its own predicate.
func FulfilmentsByPayment(ctx context.Context, q DBTX, provider, paymentID string) ([]Fulfilment, error) {
	rows, err := q.Query(ctx, `
		SELECT * FROM (
			SELECT `+fulfilmentColumns+` FROM fulfilment WHERE provider = $1 AND payment_id = $2 AND NOT failed
			UNION ALL
			SELECT `+fulfilmentColumns+` FROM fulfilment WHERE provider = $1 AND payment_id = $2 AND failed
		) f ORDER BY created_at, id`, provider, paymentID)
	if err != nil {
		return nil, wrap("list fulfilments by payment", err)
	}
	fs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Fulfilment, error) { return scanFulfilment(r) })
	return fs, wrap("list fulfilments by payment", err)
}

// CountByState returns how many fulfilments are in each of the states
// named, through fulfilment_state_idx, in time proportional to the rows
// counted: for the Live states, whose rows are the backlog. A state with
// none is absent.
func CountByState(ctx context.Context, q DBTX, states ...state.State) (map[state.State]int, error) {
	return countStates(ctx, q, "TRUE", states)
}

// CountRevocationsByState is CountByState over revocations (action
// revoke), through the partial index fulfilment_revocations.
func CountRevocationsByState(ctx context.Context, q DBTX, states ...state.State) (map[state.State]int, error) {
	return countStates(ctx, q, "action = 'revoke'", states)
}

// countStates counts the rows in the states named where filter holds, per
// state.
func countStates(ctx context.Context, q DBTX, filter string, states []state.State) (map[state.State]int, error) {
	rows, err := q.Query(ctx, `SELECT state, count(*) FROM fulfilment_move WHERE `+filter+` AND state = ANY($1::text[]) GROUP BY state`, stateNames(states))
	if err != nil {
		return nil, wrap("count by state", err)
	}
	counts := map[state.State]int{}
	return counts, wrap("count by state", collectCounts(rows, counts))
}

// stateNames is states as a query parameter: pgx's exec mode encodes a
// slice of a named type by no plan.
func stateNames(states []state.State) []string {
	names := make([]string, len(states))
	for i, s := range states {
		names[i] = string(s)
	}
	return names
}

// collectCounts reads (state, count) rows into counts.
func collectCounts(rows pgx.Rows, counts map[state.State]int) error {
	var st state.State
	var n int
	_, err := pgx.ForEachRow(rows, []any{&st, &n}, func() error { counts[st] = n; return nil })
	return err
}

// DispatchInput is what the dispatcher hands the connector: the fulfilment
// and the event that created it.
type DispatchInput struct {
	Fulfilment
	EventID   string
	EventType string
	Payload   json.RawMessage
	// Purchase is the purchase's detail as recorded when it was routed
	// (RecordPurchases); nil for payments routed before actions existed.
	Purchase json.RawMessage
}

// GraceState is a fulfilment and whether it has been in its state for at
// least a grace period, by the database's clock.
type GraceState struct {
	Fulfilment
	PastGrace bool
}

// FulfilmentsByID returns the fulfilments among ids, in no order, each with
// whether its last move is at least grace ago. Ids that are not UUIDs or not
// stored are left out.
func FulfilmentsByID(ctx context.Context, q DBTX, ids []string, grace time.Duration) ([]GraceState, error) {
	valid := make([]string, 0, len(ids))
	for _, id := range ids {
		if ValidUUID(id) {
			valid = append(valid, id)
		}
	}
	rows, err := q.Query(ctx, `SELECT `+fulfilmentColumns+`, updated_at <= now() - make_interval(secs => $2)
		FROM fulfilment WHERE id = ANY($1::uuid[])`, valid, grace.Seconds())
	if err != nil {
		return nil, wrap("fulfilments by id", err)
	}
	gs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (GraceState, error) {
		var g GraceState
		var err error
		g.Fulfilment, err = scanFulfilment(r, &g.PastGrace)
		return g, err
	})
	return gs, wrap("fulfilments by id", err)
}

// IdempotencyKey returns the key a payment's fulfilment of the action
// "fulfil" is sent under when declined of its earlier keys were declined:
// ActionKey for the one action of a deployment without an actions file.
func IdempotencyKey(ctx context.Context, q DBTX, provider, paymentID string, declined int) (string, error) {
	return ActionKey(ctx, q, provider, paymentID, "fulfil", declined)
}

// ActionKey returns the key a payment's action is sent under when declined
// of its earlier keys were declined: guardian_action_key in the
// migrations, the one place the derivation lives.
func ActionKey(ctx context.Context, q DBTX, provider, paymentID, action string, declined int) (string, error) {
	var key string
	err := q.QueryRow(ctx, `SELECT guardian_action_key($1, $2, $3, $4)`, provider, paymentID, action, declined).Scan(&key)
	return key, wrap("derive idempotency key", err)
}

// FulfilmentsByEvent returns every fulfilment an event created, oldest first.
func FulfilmentsByEvent(ctx context.Context, q DBTX, eventPK int64) ([]Fulfilment, error) {
	rows, err := q.Query(ctx, `SELECT `+fulfilmentColumns+` FROM fulfilment WHERE event_pk = $1 ORDER BY created_at, id`, eventPK)
	if err != nil {
		return nil, wrap("list fulfilments by event", err)
	}
	fs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Fulfilment, error) { return scanFulfilment(r) })
	return fs, wrap("list fulfilments by event", err)
}

// ValidUUID reports whether s is a UUID in its canonical text form, so a
// malformed id from outside is "not found" rather than a database error.
func ValidUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
				return false
			}
		}
	}
	return true
}

// ActionCounts counts the fulfilments among ids by their action.
func ActionCounts(ctx context.Context, q DBTX, ids []string) (map[string]int, error) {
	rows, err := q.Query(ctx, `SELECT action_name, count(*) FROM fulfilment WHERE id = ANY($1::uuid[]) GROUP BY action_name`, ids)
	if err != nil {
		return nil, wrap("count actions", err)
	}
	out := map[string]int{}
	var name string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error { out[name] = n; return nil })
	return out, wrap("count actions", err)
}
