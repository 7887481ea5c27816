package db

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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
	// Outcome, when set, is the call's outcome this move records
	// (fulfilment.call_outcome); nil leaves the column as it is.
	Outcome *state.Outcome
}

// Transit moves one fulfilment from p.From to p.To if, and only if, it is
// still in p.From (and at p.Attempt when given), and logs the move in the
// same statement. It returns the row as moved, or ErrConflict when the row
// was no longer where the caller expected it. The database rejects moves the
// state machine does not allow, and moves into dispatching, which take a new
// attempt: those go through ClaimForDispatch.
func Transit(ctx context.Context, q DBTX, p TransitionParams) (Fulfilment, error) {
	moved, err := TransitMany(ctx, q, []TransitionParams{p})
	if err != nil {
		return Fulfilment{}, wrap(string(p.From)+" -> "+string(p.To), err)
	}
	f, ok := moved[p.ID]
	if !ok {
		return Fulfilment{}, ErrConflict
	}
	return f, nil
}

// TransitMany makes the moves of ps, each as Transit makes one, in one
// statement, and returns the rows it moved by id; a move missing found its
// row elsewhere (ErrConflict for Transit). The ids must be distinct.
//
// "f.id = ANY ($1)" repeats the join on purpose: joined only to an unnest,
// whose size the planner cannot know, the update may be planned as a hash
// join over a sequential scan of fulfilment, which costs the whole table per
// batch (the bench measured 270 tuples read per fulfilment before it). The
// array condition makes it an index scan whatever the statistics say.
func TransitMany(ctx context.Context, q DBTX, ps []TransitionParams) (map[string]Fulfilment, error) {
	n := len(ps)
	ids, froms, tos, actors, reasons, evidence, outcomes := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	attempts := make([]int32, n)
	for i, p := range ps {
		ev := []byte("{}")
		if p.Evidence != nil {
			var err error
			if ev, err = json.Marshal(p.Evidence); err != nil {
				return nil, wrap("marshal evidence", err)
			}
		}
		ids[i], froms[i], tos[i], attempts[i], actors[i], reasons[i], evidence[i] = p.ID, string(p.From), string(p.To), int32(p.Attempt), p.Actor, p.Reason, string(ev)
		if p.Outcome != nil {
			outcomes[i] = p.Outcome.String()
		}
	}
	rows, err := q.Query(ctx, `
		WITH u AS (
			SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::int[], $5::text[], $6::text[], $7::jsonb[], $8::text[])
				AS u(id, from_state, to_state, attempt, actor, reason, evidence, outcome)
		), moved AS (
			UPDATE fulfilment_move s SET state = u.to_state, call_outcome = coalesce(NULLIF(u.outcome, ''), s.call_outcome)
			FROM u, fulfilment_identity f
			WHERE s.id = u.id AND s.id = ANY ($1::uuid[]) AND f.id = s.id AND s.state = u.from_state AND (u.attempt = 0 OR s.attempt = u.attempt)
			RETURNING `+fulfilmentOf("f", "s")+`
		), logged AS (
			INSERT INTO fulfilment_transition (fulfilment_id, from_state, to_state, attempt, actor, reason, evidence)
			SELECT m.id, u.from_state, u.to_state, m.attempt, u.actor, u.reason, u.evidence FROM moved m JOIN u ON u.id = m.id
		)
		SELECT `+fulfilmentColumns+` FROM moved`,
		ids, froms, tos, attempts, actors, reasons, evidence, outcomes)
	if err != nil {
		return nil, wrap("transit", err)
	}
	defer rows.Close()
	out := make(map[string]Fulfilment, n)
	for rows.Next() {
		f, err := scanFulfilment(rows)
		if err != nil {
			return nil, wrap("transit", err)
		}
		out[f.ID] = f
	}
	return out, wrap("transit", rows.Err())
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
// than lease, and whose claim's own deadline is more than margin past, to
// needs_reconciliation, logging each move with reason, and returns the
// rows it moved. Rows are locked with SKIP LOCKED so a dispatcher finishing
// at the same moment wins or loses cleanly, never both. The lease is
// measured against the database's clock, the one that stamped
// dispatched_at, unless asOf is given (tests pin the clock with it).
func SweepStale(ctx context.Context, q DBTX, lease, margin time.Duration, actor, reason string, asOf *time.Time) ([]Fulfilment, error) {
	rows, err := q.Query(ctx, `
		WITH stale AS (
			SELECT id FROM fulfilment_move
			WHERE state = 'dispatching' AND dispatched_at < coalesce($3::timestamptz, now()) - make_interval(secs => $1)
			  AND (deadline IS NULL OR deadline < coalesce($3::timestamptz, now()) - make_interval(secs => $4))
			ORDER BY dispatched_at
			LIMIT 1000
			FOR UPDATE SKIP LOCKED
		), moved AS (
			UPDATE fulfilment_move s SET state = 'needs_reconciliation'
			FROM stale, fulfilment_identity f WHERE s.id = stale.id AND f.id = s.id AND s.state = 'dispatching'
			RETURNING `+fulfilmentOf("f", "s")+`
		), logged AS (
			INSERT INTO fulfilment_transition (fulfilment_id, from_state, to_state, attempt, actor, reason, evidence)
			SELECT id, 'dispatching', 'needs_reconciliation', attempt, $2, $5,
			       jsonb_build_object('lease_seconds', $1::float8, 'dispatched_at', dispatched_at)
			FROM moved
		)
		SELECT `+fulfilmentColumns+` FROM moved`,
		lease.Seconds(), actor, asOf, margin.Seconds(), reason)
	if err != nil {
		return nil, wrap("sweep stale dispatching", err)
	}
	fs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Fulfilment, error) { return scanFulfilment(r) })
	return fs, wrap("sweep stale dispatching", err)
}

// ClaimParams asks for one claim.
type ClaimParams struct {
	ID       string
	Actor    string
	Evidence any
	// Timeout is the claimant's connector timeout: the claim's deadline is
	// the database's now plus Timeout, stored on the row.
	Timeout time.Duration
	// Claimant identifies the work item across its retries (a River job),
	// stored on the row: a dispatch that finds the row dispatching under
	// its own claimant parks it, and leaves another's live claim (Claim).
	Claimant string
	// Token is the claiming call's own token, stored on the row
	// (Fulfilment.ClaimToken): the call that finds it there knows the claim
	// is its own.
	Token string
	// Timeouts, when set, are the claimant's timeouts by action: a row
	// whose action is among them is claimed with its own, and a row of an
	// action the claimant does not perform is not claimed (ErrConflict).
	// Nil claims any row with Timeout.
	Timeouts map[string]time.Duration
}

// ClaimForDispatch moves a pending fulfilment to dispatching with its next
// attempt number, logs the move, and returns it with its event, all in one
// statement. ErrConflict means it was not pending.
func ClaimForDispatch(ctx context.Context, q DBTX, p ClaimParams) (DispatchInput, error) {
	id := p.ID
	claimed, err := ClaimManyForDispatch(ctx, q, []ClaimParams{p})
	if err != nil {
		return DispatchInput{}, err
	}
	in, ok := claimed[id]
	if !ok {
		return DispatchInput{}, ErrConflict
	}
	return in, nil
}

// ClaimManyForDispatch claims every pending fulfilment of claims in one
// statement, as ClaimForDispatch claims one, and returns those it moved by
// id; one missing was not pending. The ids must be distinct.
func ClaimManyForDispatch(ctx context.Context, q DBTX, claims []ClaimParams) (map[string]DispatchInput, error) {
	ids, actors, evidence, tokens, claimants := make([]string, len(claims)), make([]string, len(claims)), make([]string, len(claims)), make([]string, len(claims)), make([]string, len(claims))
	timeouts, byAction := make([]float64, len(claims)), make([]*string, len(claims))
	for i, c := range claims {
		ev, err := json.Marshal(c.Evidence)
		if err != nil {
			return nil, wrap("marshal evidence", err)
		}
		ids[i], actors[i], evidence[i], timeouts[i], tokens[i], claimants[i] = c.ID, c.Actor, string(ev), c.Timeout.Seconds(), c.Token, c.Claimant
		if c.Timeouts != nil {
			secs := make(map[string]float64, len(c.Timeouts))
			for a, t := range c.Timeouts {
				secs[a] = t.Seconds()
			}
			b, err := json.Marshal(secs)
			if err != nil {
				return nil, wrap("marshal timeouts", err)
			}
			s := string(b)
			byAction[i] = &s
		}
	}
	rows, err := q.Query(ctx, `
		WITH u AS (
			SELECT * FROM unnest($1::uuid[], $2::text[], $3::jsonb[], $4::float8[], $5::text[], $6::text[], $7::jsonb[])
				AS u(id, actor, evidence, timeout, token, claimant, timeouts)
		), moved AS (
			UPDATE fulfilment_move s SET state = 'dispatching', attempt = s.attempt + 1, dispatched_at = now(),
				deadline = now() + make_interval(secs => coalesce((u.timeouts ->> f.action_name)::float8, u.timeout)),
				claim_token = NULLIF(u.token, ''), claimant = NULLIF(u.claimant, ''), call_outcome = NULL
			FROM u, fulfilment_identity f WHERE s.id = u.id AND s.id = ANY ($1::uuid[]) AND f.id = s.id
			  -- Pending, asked so that no index answers it: the ids find
			  -- the rows, the state only checks them. As f.state =
			  -- 'pending', with statistics taken when none were pending
			  -- (a table analysed in a quiet hour, as most are), the
			  -- planner read the rows through the state's index instead:
			  -- every pending row, the whole backlog, for each batch
			  -- claimed (db.TestClaimReadsItsBatch).
			  AND (s.state = 'pending') IS TRUE
			  -- A claimant claims only the actions it performs.
			  AND (u.timeouts IS NULL OR u.timeouts ? f.action_name)
			  -- An action taken back is never performed: its pending row is
			  -- not claimed (db.MoveReversedPending stops it).
			  AND (f.action = 'revoke' OR NOT EXISTS (
				SELECT 1 FROM guardian_reversals_of(f.provider, f.payment_id) r WHERE f.action_name = ANY(r.revokes)))
			RETURNING `+fulfilmentOf("f", "s")+`
		), logged AS (
			INSERT INTO fulfilment_transition (fulfilment_id, from_state, to_state, attempt, actor, reason, evidence)
			SELECT m.id, 'pending', 'dispatching', m.attempt, u.actor, 'dispatch claimed', u.evidence FROM moved m JOIN u ON u.id = m.id
		)
		SELECT `+prefixed("m.", fulfilmentColumns)+`, e.event_id, e.event_type, e.body, p.detail
		FROM moved m JOIN webhook_event e ON e.id = m.event_pk
			LEFT JOIN purchase p ON p.provider = m.provider AND p.payment_id = m.payment_id`, ids, actors, evidence, timeouts, tokens, claimants, byAction)
	if err != nil {
		return nil, wrap("claim for dispatch", err)
	}
	defer rows.Close()
	out := make(map[string]DispatchInput, len(claims))
	for rows.Next() {
		var in DispatchInput
		var payload, purchase []byte
		if err := rows.Scan(append(in.fields(), &in.EventID, &in.EventType, &payload, &purchase)...); err != nil {
			return nil, wrap("claim for dispatch", err)
		}
		in.Payload, in.Purchase = payload, purchase
		out[in.ID] = in
	}
	return out, wrap("claim for dispatch", rows.Err())
}

// ClaimOf says who claimed a dispatching fulfilment's current attempt and
// whether that claimant's call can still be in flight.
type ClaimOf struct {
	// Claimant is what the claim recorded as its claimant ("" when it
	// recorded none).
	Claimant string
	// Live is true while the claimant may still be calling or recording:
	// until the claim's stored deadline plus margin, by the database's
	// clock (for a claim stored without a deadline, until dispatched_at
	// plus fallback).
	Live bool
}

// Claim reads who claimed a fulfilment's current attempt (the row's
// claimant, migration 00035) and whether its call could still be in
// flight: the row's own deadline decides, not the reader's configuration.
func Claim(ctx context.Context, q DBTX, id string, margin, fallback time.Duration) (ClaimOf, error) {
	var c ClaimOf
	err := q.QueryRow(ctx, `
		SELECT coalesce(f.claimant, ''),
		       coalesce(CASE WHEN f.deadline IS NOT NULL THEN f.deadline + make_interval(secs => $2) > now()
		                     ELSE f.dispatched_at > now() - make_interval(secs => $3) END, false)
		FROM fulfilment_move f WHERE f.id = $1`, id, margin.Seconds(), fallback.Seconds()).Scan(&c.Claimant, &c.Live)
	return c, wrap("read claim", err)
}

// DispatchJobs says how River names and writes a fulfilment's dispatch
// jobs. jobs owns all of it (jobs.Enqueuer.DispatchJobs); db reads
// River's table by the kind and the argument that holds the fulfilment's
// id (migration 00017's partial index is made for kind guardian_dispatch
// and argument fulfilment_id), and InsertFulfilments writes the jobs of
// the fulfilments it makes as River's insert would, in the same statement.
type DispatchJobs struct {
	Kind, IDArg string
	// Queue, Priority and MaxAttempts are the columns River's insert
	// writes for the job's options.
	Queue                 string
	Priority, MaxAttempts int
	// Topic is River's insert notification's topic (NotifyJobs).
	// NotifyEvery is the least time between two notifications from one
	// process, as River's own insert limits them.
	Topic       string
	NotifyEvery time.Duration
}

// NotifyJobs sends River's insert notification for jobs' queue, so that a
// working client's producer fetches the jobs at once rather than at its
// next poll: the channel is the schema's name, a dot and the topic, and
// the payload names the queue. The caller sends it once the jobs are
// committed, with q outside any transaction (a pool or a connection).
//
// A transaction that notifies holds Postgres's notification lock, one
// per database, from its commit's start to its end, its WAL flush
// included, so notifying commits go one at a time across every process.
// Sent by the transaction that writes the jobs, a node's intake batch
// would wait at its commit for every other node's notifying batch to be
// flushed. Alone, it writes nothing but its commit record, which
// Postgres does not wait to flush, so the lock is held for microseconds.
// A notification lost between the commit and its sending costs the jobs
// a poll's wait, never the jobs.
func NotifyJobs(ctx context.Context, q DBTX, jobs DispatchJobs) error {
	_, err := q.Exec(ctx, notifyJobsSQL, jobs.Topic, jobs.Queue)
	return wrap("notify River's workers", err)
}

// NotifyOnCommit has NotifyJobs' notification sent once tx has committed:
// on a transaction of InPipelinedTx, right after its COMMIT, in the same
// round trip; on any other, never. A notification that fails leaves the
// commit as it was; done, when set, is told its error (nil once sent), so
// that the caller can send it again rather than leave the jobs to a
// poll. done is not called when the notification was never sent: the
// transaction did not commit, or is not pipelined.
func NotifyOnCommit(tx pgx.Tx, jobs DispatchJobs, done func(error)) {
	afterCommit(tx, done, notifyJobsSQL, jobs.Topic, jobs.Queue)
}

const notifyJobsSQL = `SELECT pg_notify(current_schema() || '.' || $1, jsonb_build_object('queue', $2::text)::text)`

// sql returns the look-up of a fulfilment's live dispatch jobs for f, with
// the kind and argument written into the statement, not bound: the
// partial index's predicate and expression must be seen by the planner to
// be used. Both are plain names (checked), so nothing is injected.
func (j DispatchJobs) sql() (string, error) {
	plain := func(s string) bool { return s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyz_") == "" }
	if !plain(j.Kind) || !plain(j.IDArg) {
		return "", fmt.Errorf("dispatch jobs: kind %q and argument %q must be lower-case names", j.Kind, j.IDArg)
	}
	return `j.kind = '` + j.Kind + `' AND j.args ->> '` + j.IDArg + `' = f.id::text`, nil
}

// StrandedPending locks and returns, up to limit, pending fulfilments that
// have been pending for at least after and have no live dispatch job (of
// jobs): none available, scheduled, retryable or pending in River, and none
// running that started within after (a job running that long whose row is
// still pending never reached its claim: its fetch's answer was lost). Rows
// are locked with SKIP LOCKED, in the caller's transaction.
func StrandedPending(ctx context.Context, q DBTX, jobs DispatchJobs, after time.Duration, limit int) ([]string, error) {
	match, err := jobs.sql()
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, `
		SELECT f.id FROM fulfilment_move f
		WHERE f.state = 'pending' AND f.updated_at < now() - make_interval(secs => $1)
		  AND NOT EXISTS (
			SELECT 1 FROM river_job j
			WHERE `+match+`
			  -- the partial index's predicate, so the planner uses it
			  AND j.state IN ('available', 'scheduled', 'retryable', 'pending', 'running')
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
