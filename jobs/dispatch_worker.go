package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/db"
)

// DispatchArgs asks for one fulfilment's connector call.
type DispatchArgs struct {
	FulfilmentID string `json:"fulfilment_id"`
}

// Kind names the job in River.
func (DispatchArgs) Kind() string { return "guardian_dispatch" }

// InsertOpts puts dispatches on their own queue, tried maxAttempts times.
func (DispatchArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueDispatch, MaxAttempts: maxAttempts}
}

// DispatchWorker runs fulfilment.Service.Dispatch for one job. It decides
// nothing: it names the actor, traces the call and turns the domain's
// answer into River's (cancel for an unknown fulfilment, retry when the
// connector was not reached or the database failed).
type DispatchWorker struct {
	river.WorkerDefaults[DispatchArgs]

	service *fulfilment.Service
	tracer  trace.Tracer
	actor   func(jobID int64) string
}

// Timeout gives the job the connector's timeout plus time to record the
// outcome.
func (w *DispatchWorker) Timeout(*river.Job[DispatchArgs]) time.Duration {
	return w.service.ConnectorTimeout() + fulfilment.RecordMargin
}

// NextRetry waits backoff after the job's attempt: a fulfilment whose
// call was not sent or not delivered, or whose database failed, is tried
// again within MaxBackoff of the failure, however many came before.
func (w *DispatchWorker) NextRetry(job *river.Job[DispatchArgs]) time.Time {
	return time.Now().Add(backoff(job.Attempt))
}

// Work dispatches the job's fulfilment once.
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
	res, err := w.service.Dispatch(ctx, fulfilment.DispatchRequest{
		FulfilmentID: id, Actor: w.actor(job.ID), Claimant: fmt.Sprintf("river job %d", job.ID),
		Evidence: map[string]any{"river_attempt": job.Attempt},
	})
	if res.Called {
		span.SetAttributes(attribute.Int("guardian.attempt", res.Attempt), attribute.String("guardian.outcome", res.Outcome.String()))
	}
	if errors.Is(err, db.ErrNotFound) {
		return river.JobCancel(fmt.Errorf("fulfilment %s does not exist", id))
	}
	return err
}
