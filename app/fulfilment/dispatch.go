package fulfilment

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

// ErrNotDelivered is returned by Dispatch when the call provably did
// nothing: it never left (not sent), or the receiver refused it before its
// business logic (not delivered: 401, 403, 404, ...). The fulfilment is
// pending again and the caller retries it with backoff, without limit: a
// receiver that keeps refusing is an alert, not a verdict.
var ErrNotDelivered = errors.New("connector not reached")

// DispatchRequest asks for one attempt at one fulfilment.
type DispatchRequest struct {
	FulfilmentID string
	// Actor names the dispatcher in the transition log.
	Actor string
	// Claimant identifies the work item across its retries (a River job's
	// id): a dispatch that finds the row dispatching under its own claimant
	// knows its own earlier try's outcome is unknown.
	Claimant string
	// Evidence is recorded with the claim (the job's attempt, say).
	Evidence map[string]any
}

// DispatchResult says what one Dispatch did.
type DispatchResult struct {
	// Called is true when the connector was called.
	Called bool
	// Attempt is the attempt claimed, when Called.
	Attempt int
	// Outcome is the call's outcome, when Called.
	Outcome state.Outcome
	// State is where the fulfilment was left (or found, when not called).
	State state.State
}

// Dispatch claims a pending fulfilment, calls the connector once and
// records what the call established.
//
// The claim (pending -> dispatching, next attempt) is committed before the
// call leaves. A fulfilment found dispatching under this request's own
// claimant, or under a claim whose call can no longer be in flight, belongs
// to an attempt whose outcome is unknown (the job was retried after a crash
// or a rescue): it is parked as needs_reconciliation and nothing is called.
// One found dispatching under another live claim (a duplicate job) is left
// to its claimant. Any other state means there is nothing to do.
//
// It returns db.ErrNotFound for an unknown fulfilment, ErrNotDelivered when
// the call did nothing (the row is pending again: retry), and other errors
// when the database could not be reached.
func (s *Service) Dispatch(ctx context.Context, req DispatchRequest) (DispatchResult, error) {
	if !s.dispatches() {
		return DispatchResult{}, errors.New("dispatch: no connector configured")
	}
	id := req.FulfilmentID
	log := s.cfg.Logger.With("fulfilment_id", id, "actor", req.Actor)

	// The call must start within the connector timeout of the moment the
	// claim was asked for, not of when its answer came back: a dispatcher
	// frozen between the claim's commit and the call (a stalled VM,
	// SIGSTOP) may wake after the sweep parked its row and a lookup proved
	// "not done" and sent it again. Its deadline has passed by then, so it
	// does not send. docs/design.md says what a suspended clock does here.
	asked := time.Now()

	evidence := map[string]any{"claimant": req.Claimant}
	maps.Copy(evidence, req.Evidence)
	// This call's own token, stored with its claim: found on the row by
	// this call, it proves the claim is one this call made and has not
	// called out on.
	token := rand.Text()
	// Only a row of an action this process performs is claimed, with that
	// action's timeout as its deadline.
	in, err := s.claim(ctx, db.ClaimParams{ID: id, Actor: req.Actor, Evidence: evidence, Timeout: s.cfg.ConnectorTimeout, Timeouts: s.timeouts, Token: token, Claimant: req.Claimant})
	if errors.Is(err, db.ErrConflict) {
		return s.unclaimable(ctx, log, req, token)
	}
	if err != nil {
		// The claim may have committed with its answer lost: if the row
		// holds this call's claim, nothing was sent, and it goes back.
		return s.unclaim(ctx, log, req, token, err)
	}
	claimed := in.Fulfilment
	s.cfg.Metrics.Transition(claimed.ActionName, state.Pending, state.Dispatching, 1)
	log = log.With("payment_id", in.PaymentID, "event_id", in.EventID, "attempt", claimed.Attempt)

	perf, _ := s.performer(claimed.ActionName) // claimed: so performed here
	callCtx, cancel := context.WithDeadline(ctx, asked.Add(perf.Timeout))
	defer cancel()
	start := time.Now()
	call := connector.Request{
		Key: claimed.Key, FulfilmentID: id, Attempt: claimed.Attempt, Provider: in.Provider,
		PaymentID: in.PaymentID, EventID: in.EventID, EventType: in.EventType, Action: claimed.Action, Payload: in.Payload,
	}
	if s.cfg.Actions.Source != "" {
		// A deployment with an actions file names the action and sends the
		// purchase; without one the body is what it always was.
		call.ActionName, call.Purchase = claimed.ActionName, in.Purchase
	}
	res := perf.Connector.Fulfil(callCtx, call)
	s.cfg.Metrics.Dispatch(claimed.ActionName, res.Outcome, errorClass(res), time.Since(start).Seconds())
	out := DispatchResult{Called: true, Attempt: claimed.Attempt, Outcome: res.Outcome}
	out.State, err = s.record(ctx, log, claimed, res, req.Actor)
	return out, err
}

// ErrNotPerformedHere means a fulfilment's action is not among this
// process's actions: it stays pending for a process that performs it.
var ErrNotPerformedHere = errors.New("action not performed here")

// dispatches reports whether this process performs any action.
func (s *Service) dispatches() bool {
	for _, p := range s.performers {
		if p.Connector != nil {
			return true
		}
	}
	return false
}

// unclaimable applies the rules to a fulfilment the claim did not find
// pending, or did not claim because its payment was taken back.
func (s *Service) unclaimable(ctx context.Context, log *slog.Logger, req DispatchRequest, token string) (DispatchResult, error) {
	cur, err := db.GetFulfilment(ctx, s.cfg.Store.Pool(), req.FulfilmentID)
	if err != nil {
		return DispatchResult{}, err
	}
	if ownClaim(cur, token) {
		// A batch of claims whose answer was lost, then retried claim by
		// claim (writeClaims): the batch had claimed it for this call.
		return s.putBack(ctx, log, req, cur)
	}
	if cur.State == state.Pending && cur.Action == state.Fulfil {
		// Pending, yet not claimed: its payment was taken back.
		stopped, err := s.stopReversedPending(ctx, s.cfg.Store.Pool(), req.Actor, []db.Payment{{Provider: cur.Provider, PaymentID: cur.PaymentID}})
		if err != nil {
			return DispatchResult{}, err
		}
		for to, ids := range stopped {
			s.countMoved(ctx, state.Pending, to, ids)
			if slices.Contains(ids, cur.ID) {
				log.InfoContext(ctx, "dispatch: payment reversed before its fulfilment went out; not sent", "payment_id", cur.PaymentID, "state", to)
				return DispatchResult{State: to}, nil
			}
		}
		if _, ok := s.performer(cur.ActionName); !ok {
			// Pending, not claimed: this process does not perform the
			// action (a node whose actions file lacks it, during a
			// rollout). The job retries; a node that performs it claims it.
			return DispatchResult{State: cur.State}, fmt.Errorf("%w: action %q is not performed by this process", ErrNotPerformedHere, cur.ActionName)
		}
	}
	if cur.State != state.Dispatching {
		log.InfoContext(ctx, "dispatch: nothing to do", "state", cur.State)
		return DispatchResult{State: cur.State}, nil
	}
	claim, err := db.Claim(ctx, s.cfg.Store.Pool(), cur.ID, RecordMargin, s.cfg.ConnectorTimeout+RecordMargin)
	if err != nil {
		return DispatchResult{}, err
	}
	if claim.Live && claim.Claimant != "" && claim.Claimant != req.Claimant {
		log.InfoContext(ctx, "dispatch: another dispatcher holds a live claim; leaving it", "attempt", cur.Attempt)
		return DispatchResult{State: cur.State}, nil
	}
	_, err = db.Transit(ctx, s.cfg.Store.Pool(), db.TransitionParams{
		ID: cur.ID, From: state.Dispatching, To: state.NeedsReconciliation, Attempt: cur.Attempt,
		Actor: req.Actor, Reason: "dispatch job found the fulfilment dispatching: an earlier attempt's outcome is unknown",
		Evidence: map[string]any{"attempt": cur.Attempt, "dispatched_at": cur.DispatchedAt, "claimant": claim.Claimant},
	})
	if errors.Is(err, db.ErrConflict) {
		log.InfoContext(ctx, "dispatch: fulfilment moved before it could be parked")
		return DispatchResult{State: cur.State}, nil
	}
	if err != nil {
		return DispatchResult{}, err
	}
	s.cfg.Metrics.Transition(cur.ActionName, state.Dispatching, state.NeedsReconciliation, 1)
	log.WarnContext(ctx, "dispatch: parked an attempt of unknown outcome for reconciliation", "attempt", cur.Attempt)
	return DispatchResult{State: state.NeedsReconciliation}, nil
}

// ErrClaimLost means a claim's answer was lost and the claim was put back
// (the row is pending again, nothing was sent), or could not be read back
// yet: the caller retries, as after any failed claim.
var ErrClaimLost = errors.New("the claim's answer was lost; nothing was sent")

// ownClaim reports whether f holds the claim of the call whose token is
// token: dispatching under it, so that call has not called out yet.
func ownClaim(f db.Fulfilment, token string) bool {
	return f.State == state.Dispatching && f.ClaimToken != nil && *f.ClaimToken == token
}

// unclaim answers a claim that failed with err, its commit perhaps made and
// its answer lost (a Postgres blip, a reset connection): it reads the row
// back, asking again for a while, and puts back a claim this call made, for
// this call knows it never called out. A claim it cannot read back, or that
// is not its own, is left to the rules: the job's retry, or the sweep,
// parks it.
func (s *Service) unclaim(ctx context.Context, log *slog.Logger, req DispatchRequest, token string, err error) (DispatchResult, error) {
	for wait := 50 * time.Millisecond; ; wait *= 2 {
		cur, gerr := db.GetFulfilment(ctx, s.cfg.Store.Pool(), req.FulfilmentID)
		switch {
		case gerr == nil && ownClaim(cur, token):
			return s.putBack(ctx, log, req, cur)
		case gerr == nil:
			return DispatchResult{State: cur.State}, err
		case wait > s.cfg.ConnectorTimeout:
			return DispatchResult{}, err
		}
		select {
		case <-ctx.Done():
			return DispatchResult{}, err
		case <-time.After(wait):
		}
	}
}

// putBack moves this call's own claim, which it never called out on,
// back to pending under the same key and body: proof that nothing was
// sent, as a connection refused before any byte left is.
func (s *Service) putBack(ctx context.Context, log *slog.Logger, req DispatchRequest, cur db.Fulfilment) (DispatchResult, error) {
	err := s.transit(ctx, db.TransitionParams{
		ID: cur.ID, From: state.Dispatching, To: state.Pending, Attempt: cur.Attempt, Actor: req.Actor,
		Reason:   "the claim's answer was lost; the dispatcher that made it never called out: nothing was sent",
		Evidence: map[string]any{"attempt": cur.Attempt, "claimant": req.Claimant},
	})
	if errors.Is(err, db.ErrConflict) {
		return DispatchResult{State: cur.State}, ErrClaimLost
	}
	if err != nil {
		return DispatchResult{}, err
	}
	s.cfg.Metrics.Transition(cur.ActionName, state.Pending, state.Dispatching, 1)
	s.cfg.Metrics.Transition(cur.ActionName, state.Dispatching, state.Pending, 1)
	log.WarnContext(ctx, "dispatch: the claim's answer was lost; nothing was sent, so the fulfilment is pending again", "attempt", cur.Attempt)
	return DispatchResult{State: state.Pending}, ErrClaimLost
}

// record moves the claimed fulfilment by the call's outcome. It runs on a
// context that survives the caller's cancellation: what the connector
// answered is a fact worth writing even during shutdown. A success that
// finds the row parked (the sweep's lease ran out while it waited) is a
// fact too, and settles the parked row.
func (s *Service) record(ctx context.Context, log *slog.Logger, claimed db.Fulfilment, res connector.Result, actor string) (state.State, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), RecordMargin)
	defer cancel()

	evidence := maps.Clone(res.Evidence)
	if evidence == nil {
		evidence = map[string]any{}
	}
	evidence["outcome"] = res.Outcome.String()
	next := state.AfterDispatch(res.Outcome)
	err := s.transit(ctx, db.TransitionParams{
		ID: claimed.ID, From: state.Dispatching, To: next, Attempt: claimed.Attempt,
		Actor: actor, Reason: "connector outcome: " + res.Outcome.String(), Evidence: evidence, Outcome: &res.Outcome,
	})
	switch {
	case errors.Is(err, db.ErrConflict) && res.Outcome == state.Done:
		_, err = db.Transit(ctx, s.cfg.Store.Pool(), db.TransitionParams{
			ID: claimed.ID, From: state.NeedsReconciliation, To: state.Fulfilled, Attempt: claimed.Attempt,
			Actor: actor, Reason: "late success of the parked attempt", Evidence: evidence, Outcome: &res.Outcome,
		})
		if errors.Is(err, db.ErrConflict) {
			log.WarnContext(ctx, "dispatch: late success found the fulfilment moved on; recorded nothing", "evidence", evidence)
			return s.current(ctx, claimed.ID)
		}
		if err != nil {
			return "", s.recordFailed(ctx, log, evidence, err)
		}
		s.cfg.Metrics.Transition(claimed.ActionName, state.NeedsReconciliation, state.Fulfilled, 1)
		log.InfoContext(ctx, "dispatch: late success resolved the parked fulfilment")
		return state.Fulfilled, nil
	case errors.Is(err, db.ErrConflict):
		log.WarnContext(ctx, "dispatch: fulfilment moved while calling; outcome not recorded", "outcome", res.Outcome.String(), "evidence", evidence)
		return s.current(ctx, claimed.ID)
	case err != nil:
		return "", s.recordFailed(ctx, log, evidence, err)
	}
	s.cfg.Metrics.Transition(claimed.ActionName, state.Dispatching, next, 1)

	switch next {
	case state.Fulfilled:
		log.InfoContext(ctx, "dispatch: fulfilled")
	case state.Pending:
		log.WarnContext(ctx, "dispatch: the call did nothing ("+res.Outcome.String()+"); will retry", "evidence", evidence)
		return next, fmt.Errorf("%w (%s): %s", ErrNotDelivered, res.Outcome, cmp.Or(res.Error, strconv.Itoa(res.Status)))
	case state.Failed:
		log.WarnContext(ctx, "dispatch: connector rejected the fulfilment", "evidence", evidence)
	default:
		log.WarnContext(ctx, "dispatch: outcome unknown; parked for reconciliation", "evidence", evidence)
	}
	return next, nil
}

// current reads where a fulfilment stands, for a result; a read error
// leaves the state blank rather than failing what was already decided.
func (s *Service) current(ctx context.Context, id string) (state.State, error) {
	f, err := db.GetFulfilment(ctx, s.cfg.Store.Pool(), id)
	if err != nil {
		return "", nil
	}
	return f.State, nil
}

// recordFailed reports an outcome that could not be written. The caller
// retries the job, which finds the row dispatching and parks it: the fact is
// lost from the row but kept in this log line, and the reconciler's lookup
// can establish it again.
func (s *Service) recordFailed(ctx context.Context, log *slog.Logger, evidence map[string]any, err error) error {
	log.ErrorContext(ctx, "dispatch: could not record the connector's outcome", "evidence", evidence, "error", err)
	return fmt.Errorf("record outcome: %w", err)
}

// errorClass names why a call did not succeed, for the connector-errors
// metric: the HTTP status class, or the transport error's class.
func errorClass(res connector.Result) string {
	if res.Outcome == state.Done {
		return ""
	}
	if res.Status != 0 {
		return fmt.Sprintf("%dxx", res.Status/100)
	}
	return cmp.Or(res.Error, res.Outcome.String())
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
		return db.ClaimForDispatch(ctx, s.cfg.Store.Pool(), p)
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
			c.in, c.err = db.ClaimForDispatch(ctx, s.cfg.Store.Pool(), c.p)
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
