package jobs

import (
	"context"
	"time"

	"github.com/riverqueue/river"

	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/db"
)

// RouteArgs asks for the items of one purchase recorded awaiting them,
// and its routing (fulfilment.Service.RouteAwaiting).
type RouteArgs struct {
	Provider  string `json:"provider"`
	PaymentID string `json:"payment_id"`
}

// Kind names the job in River.
func (RouteArgs) Kind() string { return "guardian_route" }

// InsertOpts puts routing on its own queue, one live job per purchase:
// intake, a replay and the sweep may each ask, and River keeps one.
func (RouteArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueRoute, MaxAttempts: maxAttempts, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// RouteWorker runs fulfilment.Service.RouteAwaiting for one job. A fetch
// that fails is retried by River (backoff); the purchase stays
// awaiting, with its last error, for operators.
type RouteWorker struct {
	river.WorkerDefaults[RouteArgs]

	service *fulfilment.Service
	actor   func(jobID int64) string
}

// Timeout bounds a fetch and the routing's transaction.
func (w *RouteWorker) Timeout(*river.Job[RouteArgs]) time.Duration { return fulfilment.RouteTimeout }

// NextRetry waits backoff after the job's attempt.
func (w *RouteWorker) NextRetry(job *river.Job[RouteArgs]) time.Time {
	return time.Now().Add(backoff(job.Attempt))
}

// Work routes the job's purchase, if it still awaits its items.
func (w *RouteWorker) Work(ctx context.Context, job *river.Job[RouteArgs]) error {
	_, err := w.service.RouteAwaiting(ctx, db.Payment{Provider: job.Args.Provider, PaymentID: job.Args.PaymentID}, w.actor(job.ID))
	return err
}
