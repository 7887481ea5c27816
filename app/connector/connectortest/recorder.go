// Package connectortest provides an in-process connector that records every
// call, for tests that count what reached the connector.
package connectortest

import (
	"context"
	"sync"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/state"
)

// Recorder is a connector that records each call and answers with Answer
// (Done when Answer is nil). It is safe for concurrent use.
type Recorder struct {
	// Answer decides each call's result. It may block, for example until a
	// test releases it.
	Answer func(ctx context.Context, req connector.Request) connector.Result

	mu    sync.Mutex
	calls []connector.Request
}

// Fulfil records req and answers.
func (r *Recorder) Fulfil(ctx context.Context, req connector.Request) connector.Result {
	r.mu.Lock()
	r.calls = append(r.calls, req)
	r.mu.Unlock()
	if r.Answer != nil {
		return r.Answer(ctx, req)
	}
	return connector.Result{Outcome: state.Done, Evidence: map[string]any{"connector": "recorder"}}
}

// Calls returns every request so far, in arrival order.
func (r *Recorder) Calls() []connector.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]connector.Request(nil), r.calls...)
}

// CallsFor counts the calls for one fulfilment.
func (r *Recorder) CallsFor(fulfilmentID string) int {
	n := 0
	for _, c := range r.Calls() {
		if c.FulfilmentID == fulfilmentID {
			n++
		}
	}
	return n
}

// CallsForPayment counts the calls for one payment.
func (r *Recorder) CallsForPayment(paymentID string) int {
	n := 0
	for _, c := range r.Calls() {
		if c.PaymentID == paymentID {
			n++
		}
	}
	return n
}

// LookerFunc is a connector.Looker answering with a function.
type LookerFunc func(ctx context.Context, key string) (connector.Answer, map[string]any, error)

// Lookup calls f.
func (f LookerFunc) Lookup(ctx context.Context, key string) (connector.Answer, map[string]any, error) {
	return f(ctx, key)
}
