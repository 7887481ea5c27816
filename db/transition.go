package db

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/state"
)

// Transition is one row of the append-only fulfilment_transition log.
type Transition struct {
	ID           int64
	FulfilmentID string
	From         state.State
	To           state.State
	Attempt      int
	Actor        string
	Reason       string
	Evidence     json.RawMessage
	CreatedAt    time.Time
}

// TransitionParams names one conditional move.
type TransitionParams struct {
	ID   string
	From state.State
	To   state.State
	// Attempt, when not zero, must equal the row's attempt: the fencing
	// number of the dispatcher that claimed it.
	Attempt  int
	Actor    string
	Reason   string
	Evidence any // marshalled to JSON; nil means {}
}

// Transit moves one fulfilment from p.From to p.To if, and only if, it is
// still in p.From (and at p.Attempt when given), and logs the move in the
// same statement. It returns the row as moved, or ErrConflict when the row
// was no longer where the caller expected it. The database rejects moves the
// state machine does not allow, and moves into dispatching, which take a new
// attempt: those go through ClaimForDispatch.
func Transit(ctx context.Context, q DBTX, p TransitionParams) (Fulfilment, error) {
	evidence := []byte("{}")
	if p.Evidence != nil {
		var err error
		if evidence, err = json.Marshal(p.Evidence); err != nil {
			return Fulfilment{}, wrap("marshal evidence", err)
		}
	}
	f, err := scanFulfilment(q.QueryRow(ctx, `
		WITH moved AS (
			UPDATE fulfilment SET state = $3
			WHERE id = $1 AND state = $2 AND ($4 = 0 OR attempt = $4)
			RETURNING `+fulfilmentColumns+`
		), logged AS (
			INSERT INTO fulfilment_transition (fulfilment_id, from_state, to_state, attempt, actor, reason, evidence)
			SELECT id, $2, $3, attempt, $5, $6, $7 FROM moved
		)
		SELECT `+fulfilmentColumns+` FROM moved`,
		p.ID, p.From, p.To, p.Attempt, p.Actor, p.Reason, string(evidence),
	))
	if errors.Is(err, pgx.ErrNoRows) {
		return Fulfilment{}, ErrConflict
	}
	return f, wrap("transit "+string(p.From)+" -> "+string(p.To), err)
}

// Transitions returns the logs of one or more fulfilments in one query,
// oldest first.
func Transitions(ctx context.Context, q DBTX, fulfilmentIDs ...string) ([]Transition, error) {
	rows, err := q.Query(ctx, `
		SELECT id, fulfilment_id, coalesce(from_state, ''), to_state, attempt, actor, reason, evidence, created_at
		FROM fulfilment_transition WHERE fulfilment_id = ANY($1::uuid[]) ORDER BY id`, fulfilmentIDs)
	if err != nil {
		return nil, wrap("list transitions", err)
	}
	ts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Transition, error) {
		var t Transition
		var ev []byte
		err := r.Scan(&t.ID, &t.FulfilmentID, &t.From, &t.To, &t.Attempt, &t.Actor, &t.Reason, &ev, &t.CreatedAt)
		t.Evidence = ev
		return t, err
	})
	return ts, wrap("list transitions", err)
}

// SweepStale moves every fulfilment that has been dispatching for longer
// than lease to needs_reconciliation, logging each move, and returns the
// rows it moved. Rows are locked with SKIP LOCKED so a dispatcher finishing
// at the same moment wins or loses cleanly, never both. The lease is
// measured against the database's clock, the one that stamped
// dispatched_at, unless asOf is given (tests pin the clock with it).
func SweepStale(ctx context.Context, q DBTX, lease time.Duration, actor string, asOf *time.Time) ([]Fulfilment, error) {
	rows, err := q.Query(ctx, `
		WITH stale AS (
			SELECT id FROM fulfilment
			WHERE state = 'dispatching' AND dispatched_at < coalesce($3::timestamptz, now()) - make_interval(secs => $1)
			ORDER BY dispatched_at
			LIMIT 1000
			FOR UPDATE SKIP LOCKED
		), moved AS (
			UPDATE fulfilment f SET state = 'needs_reconciliation'
			FROM stale WHERE f.id = stale.id AND f.state = 'dispatching'
			RETURNING f.id, f.event_pk, f.provider, f.payment_id, f.state, f.attempt, f.created_at, f.updated_at, f.dispatched_at, f.checks, f.next_check_at
		), logged AS (
			INSERT INTO fulfilment_transition (fulfilment_id, from_state, to_state, attempt, actor, reason, evidence)
			SELECT id, 'dispatching', 'needs_reconciliation', attempt, $2,
			       'dispatch lease expired: the connector call may or may not have happened',
			       jsonb_build_object('lease_seconds', $1::float8, 'dispatched_at', dispatched_at)
			FROM moved
		)
		SELECT `+fulfilmentColumns+` FROM moved`,
		lease.Seconds(), actor, asOf)
	if err != nil {
		return nil, wrap("sweep stale dispatching", err)
	}
	fs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Fulfilment, error) { return scanFulfilment(r) })
	return fs, wrap("sweep stale dispatching", err)
}

// ClaimForDispatch moves a pending fulfilment to dispatching with its next
// attempt number, logs the move, and returns it with its event, all in one
// statement. ErrConflict means it was not pending.
func ClaimForDispatch(ctx context.Context, q DBTX, id, actor string, evidence any) (DispatchInput, error) {
	ev, err := json.Marshal(evidence)
	if err != nil {
		return DispatchInput{}, wrap("marshal evidence", err)
	}
	var in DispatchInput
	var payload []byte
	err = q.QueryRow(ctx, `
		WITH moved AS (
			UPDATE fulfilment SET state = 'dispatching', attempt = attempt + 1, dispatched_at = now()
			WHERE id = $1 AND state = 'pending'
			RETURNING `+fulfilmentColumns+`
		), logged AS (
			INSERT INTO fulfilment_transition (fulfilment_id, from_state, to_state, attempt, actor, reason, evidence)
			SELECT id, 'pending', 'dispatching', attempt, $2, 'dispatch claimed', $3 FROM moved
		)
		SELECT `+prefixed("m.", fulfilmentColumns)+`, e.event_id, e.event_type, e.body
		FROM moved m JOIN webhook_event e ON e.id = m.event_pk`, id, actor, string(ev),
	).Scan(&in.ID, &in.EventPK, &in.Provider, &in.PaymentID, &in.State, &in.Attempt, &in.CreatedAt, &in.UpdatedAt, &in.DispatchedAt,
		&in.Checks, &in.NextCheckAt, &in.EventID, &in.EventType, &payload)
	if errors.Is(err, pgx.ErrNoRows) {
		return DispatchInput{}, ErrConflict
	}
	in.Payload = payload
	return in, wrap("claim for dispatch", err)
}

// ClaimOf says who claimed a dispatching fulfilment's current attempt and
// whether that claimant's call can still be in flight.
type ClaimOf struct {
	// Claimant is what the claim recorded as its claimant ("" when it
	// recorded none).
	Claimant string
	// Live is true while dispatched_at is within window of the database's
	// clock: the claimant may still be calling.
	Live bool
}

// Claim reads who claimed a fulfilment's current attempt, from the claim's
// transition, and whether its call could still be in flight within window.
func Claim(ctx context.Context, q DBTX, id string, window time.Duration) (ClaimOf, error) {
	var c ClaimOf
	err := q.QueryRow(ctx, `
		SELECT coalesce((SELECT t.evidence ->> 'claimant' FROM fulfilment_transition t
		                 WHERE t.fulfilment_id = f.id AND t.to_state = 'dispatching' AND t.attempt = f.attempt
		                 ORDER BY t.id DESC LIMIT 1), ''),
		       coalesce(f.dispatched_at > now() - make_interval(secs => $2), false)
		FROM fulfilment f WHERE f.id = $1`, id, window.Seconds()).Scan(&c.Claimant, &c.Live)
	return c, wrap("read claim", err)
}

// StrandedPending locks and returns, up to limit, pending fulfilments that
// have been pending for at least after and have no live dispatch job: none
// available, scheduled, retryable or pending in River, and none running
// that started within after (a job running that long whose row is still
// pending never reached its claim: its fetch's answer was lost). Rows are
// locked with SKIP LOCKED, in the caller's transaction.
func StrandedPending(ctx context.Context, q DBTX, after time.Duration, limit int) ([]string, error) {
	rows, err := q.Query(ctx, `
		SELECT f.id FROM fulfilment f
		WHERE f.state = 'pending' AND f.updated_at < now() - make_interval(secs => $1)
		  AND NOT EXISTS (
			SELECT 1 FROM river_job j
			WHERE j.kind = 'guardian_dispatch' AND j.args ->> 'fulfilment_id' = f.id::text
			  AND (j.state IN ('available', 'scheduled', 'retryable', 'pending')
			       OR (j.state = 'running' AND j.attempted_at > now() - make_interval(secs => $1))))
		ORDER BY f.updated_at
		LIMIT $2
		FOR UPDATE OF f SKIP LOCKED`, after.Seconds(), limit)
	if err != nil {
		return nil, wrap("find stranded pending", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids, wrap("find stranded pending", err)
}
