package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/metrics"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

// DispatchArgs asks for one fulfilment's connector call.
type DispatchArgs struct {
	FulfilmentID string `json:"fulfilment_id"`
}

// Kind names the job in River.
func (DispatchArgs) Kind() string { return "guardian_dispatch" }

// InsertOpts puts dispatches on their own queue.
func (DispatchArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueDispatch}
}

// DispatchWorker performs a fulfilment's action through the connector, at
// most once per attempt.
type DispatchWorker struct {
	river.WorkerDefaults[DispatchArgs]

	store     *db.Store
	connector connector.Connector
	timeout   time.Duration
	logger    *slog.Logger
	metrics   *metrics.Metrics
	tracer    trace.Tracer
	actor     func(jobID int64) string
}

// Timeout gives the job the connector's timeout plus time to record the outcome.
func (w *DispatchWorker) Timeout(*river.Job[DispatchArgs]) time.Duration {
	return w.timeout + recordMargin
}

// Work claims the fulfilment, calls the connector and records the outcome.
func (w *DispatchWorker) Work(ctx context.Context, job *river.Job[DispatchArgs]) (err error) {
	id := job.Args.FulfilmentID
	ctx, span := w.tracer.Start(ctx, "guardian.dispatch", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("guardian.fulfilment_id", id), attribute.Int64("river.job_id", job.ID), attribute.Int("river.attempt", job.Attempt)))
	defer func() {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	actor := w.actor(job.ID)
	log := w.logger.With("fulfilment_id", id, "job_id", job.ID)

	// The common case is one statement: claim the pending fulfilment and
	// read what the connector needs. Committed before the call goes out.
	in, err := db.ClaimForDispatch(ctx, w.store.Pool(), id, actor, map[string]any{"river_attempt": job.Attempt})
	if errors.Is(err, db.ErrConflict) {
		// Not pending: look at where it is and apply the rules.
		cur, err := db.GetFulfilment(ctx, w.store.Pool(), id)
		if errors.Is(err, db.ErrNotFound) {
			return river.JobCancel(fmt.Errorf("fulfilment %s does not exist", id))
		}
		if err != nil {
			return err
		}
		if state.State(cur.State) == state.Dispatching {
			return w.parkUnknown(ctx, log, cur, actor)
		}
		log.InfoContext(ctx, "dispatch: nothing to do", "state", cur.State)
		return nil
	}
	if err != nil {
		return err
	}
	claimed := in.Fulfilment
	log = log.With("payment_id", in.PaymentID, "event_id", in.EventID)
	w.metrics.Transition(string(state.Pending), string(state.Dispatching), 1)
	log = log.With("attempt", claimed.Attempt)

	// The call must start within the connector timeout of the claim. A
	// dispatcher frozen after its claim (a stalled VM, SIGSTOP) may wake
	// after the sweep parked its row and the reconciler proved "not done"
	// and dispatched again: its deadline has passed by then, so it does not
	// send. (A process frozen in the middle of writing its request can
	// still deliver it on waking; receivers fence on Guardian-Attempt or
	// honour the Idempotency-Key for that: docs/design.md.)
	start := time.Now()
	callCtx, cancelCall := context.WithDeadline(ctx, start.Add(w.timeout))
	defer cancelCall()
	res := w.connector.Fulfil(callCtx, connector.Request{
		FulfilmentID: id, Attempt: claimed.Attempt, PaymentID: in.PaymentID,
		EventID: in.EventID, EventType: in.EventType, Payload: in.Payload,
	})
	w.metrics.Dispatch(res.Outcome, errorClass(res), time.Since(start).Seconds())
	span.SetAttributes(attribute.Int("guardian.attempt", claimed.Attempt), attribute.String("guardian.outcome", res.Outcome.String()))
	return w.record(ctx, log, claimed, res, actor)
}

// record moves the claimed fulfilment by the call's outcome. It runs on a
// context that survives the job's cancellation: what the connector answered
// is a fact worth writing even during shutdown.
func (w *DispatchWorker) record(ctx context.Context, log *slog.Logger, claimed db.Fulfilment, res connector.Result, actor string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordMargin)
	defer cancel()

	evidence := map[string]any{"outcome": res.Outcome.String()}
	for k, v := range res.Evidence {
		evidence[k] = v
	}
	next := state.AfterDispatch(res.Outcome)
	_, err := db.Transit(ctx, w.store.Pool(), db.TransitionParams{
		ID: claimed.ID, From: string(state.Dispatching), To: string(next), Attempt: claimed.Attempt,
		Actor: actor, Reason: "connector outcome: " + res.Outcome.String(), Evidence: evidence,
	})
	switch {
	case errors.Is(err, db.ErrConflict) && res.Outcome == state.Done:
		// The sweep parked the row while we waited: a late success is a fact
		// and settles it.
		_, err = db.Transit(ctx, w.store.Pool(), db.TransitionParams{
			ID: claimed.ID, From: string(state.NeedsReconciliation), To: string(state.Fulfilled), Attempt: claimed.Attempt,
			Actor: actor, Reason: "late success of the parked attempt", Evidence: evidence,
		})
		if errors.Is(err, db.ErrConflict) {
			log.WarnContext(ctx, "dispatch: late success found the fulfilment moved on; recorded nothing", "evidence", evidence)
			return nil
		}
		if err != nil {
			return w.recordFailed(ctx, log, evidence, err)
		}
		w.metrics.Transition(string(state.NeedsReconciliation), string(state.Fulfilled), 1)
		log.InfoContext(ctx, "dispatch: late success resolved the parked fulfilment")
		return nil
	case errors.Is(err, db.ErrConflict):
		log.WarnContext(ctx, "dispatch: fulfilment moved while calling; outcome not recorded", "outcome", res.Outcome.String(), "evidence", evidence)
		return nil
	case err != nil:
		return w.recordFailed(ctx, log, evidence, err)
	}
	w.metrics.Transition(string(state.Dispatching), string(next), 1)

	switch next {
	case state.Fulfilled:
		log.InfoContext(ctx, "dispatch: fulfilled")
	case state.Pending:
		// Nothing left this process: River retries the job with backoff,
		// and the retry claims a new attempt.
		log.WarnContext(ctx, "dispatch: connector not reached; will retry", "evidence", evidence)
		return fmt.Errorf("connector not reached: %v", evidence["error"])
	case state.Failed:
		log.WarnContext(ctx, "dispatch: connector rejected the fulfilment", "evidence", evidence)
	default:
		log.WarnContext(ctx, "dispatch: outcome unknown; parked for reconciliation", "evidence", evidence)
	}
	return nil
}

// recordFailed reports an outcome that could not be written. River retries
// the job, which finds the row dispatching and parks it: the fact is lost
// from the row but kept in this log line, and the reconciler's lookup can
// establish it again.
func (w *DispatchWorker) recordFailed(ctx context.Context, log *slog.Logger, evidence map[string]any, err error) error {
	log.ErrorContext(ctx, "dispatch: could not record the connector's outcome", "evidence", evidence, "error", err)
	return fmt.Errorf("record outcome: %w", err)
}

// parkUnknown moves a fulfilment found dispatching to needs_reconciliation:
// an earlier attempt may or may not have reached the connector.
func (w *DispatchWorker) parkUnknown(ctx context.Context, log *slog.Logger, f db.Fulfilment, actor string) error {
	_, err := db.Transit(ctx, w.store.Pool(), db.TransitionParams{
		ID: f.ID, From: string(state.Dispatching), To: string(state.NeedsReconciliation), Attempt: f.Attempt,
		Actor: actor, Reason: "dispatch job found the fulfilment dispatching: an earlier attempt's outcome is unknown",
		Evidence: map[string]any{"attempt": f.Attempt, "dispatched_at": f.DispatchedAt},
	})
	if errors.Is(err, db.ErrConflict) {
		log.InfoContext(ctx, "dispatch: fulfilment moved before it could be parked")
		return nil
	}
	if err != nil {
		return err
	}
	w.metrics.Transition(string(state.Dispatching), string(state.NeedsReconciliation), 1)
	log.WarnContext(ctx, "dispatch: parked an attempt of unknown outcome for reconciliation", "attempt", f.Attempt)
	return nil
}

// errorClass names why a call did not succeed, for the connector-errors
// metric: the HTTP status class, or the transport error's class.
func errorClass(res connector.Result) string {
	if res.Outcome == state.Done {
		return ""
	}
	if code, ok := res.Evidence["status"].(int); ok {
		return fmt.Sprintf("%dxx", code/100)
	}
	if e, ok := res.Evidence["error"].(string); ok && e != "" {
		return e
	}
	return res.Outcome.String()
}
