package web

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/db"
)

// statusClientClosed records a request whose sender left before the answer
// (nginx's 499); the sender never sees it.
const statusClientClosed = 499

// webhookAnswer is the body of a 200 to a provider.
type webhookAnswer struct {
	Status  string `json:"status"` // "accepted" or "duplicate"
	EventID string `json:"event_id"`
}

func (s *Server) handleWebhook(c echo.Context) error {
	start := time.Now()
	name := c.Param("provider")
	p, ok := s.providers[name]
	if !ok {
		err := &HTTPError{Code: http.StatusNotFound, Msg: "unknown provider"}
		if s.overBudget(c) {
			return s.limited(c, "unknown", start)
		}
		s.refuse(c, "unknown", refused(db.RefusedUnknownProvider, err.Msg, "no provider is served at "+c.Request().URL.Path))
		return err
	}
	ctx, span := s.cfg.Tracer.Start(c.Request().Context(), "guardian.intake", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("guardian.provider", name)))
	c.SetRequest(c.Request().WithContext(ctx))
	outcome, err := s.receive(c, p)
	span.SetAttributes(attribute.String("guardian.outcome", outcome.label()))
	if outcome.kind == kindUnavailable {
		span.SetStatus(codes.Error, outcome.label())
	}
	span.End()
	if outcome.kind == kindRefused && s.overBudget(c) {
		return s.limited(c, name, start)
	}
	s.metrics.Delivery(name, outcome.label(), time.Since(start).Seconds())
	if outcome.kind == kindRefused {
		s.refuse(c, name, outcome)
	}
	s.activity.record(s.now(), name, outcome.kind)
	return err
}

// The refused-delivery budget of one client address: a burst of
// refusedBurst refusals, one more every refusedEvery.
const (
	refusedBurst = 60
	refusedEvery = 100 * time.Millisecond
)

// overBudget spends one of the client's refusals, and reports whether it
// had none left.
func (s *Server) overBudget(c echo.Context) bool {
	if _, blocked := s.refused.blocked(c.RealIP()); blocked {
		return true
	}
	s.refused.fail(c.RealIP())
	return false
}

// limited answers a refused delivery from an address whose refusal budget
// is spent: 429 with Retry-After, counted, neither logged nor recorded, so
// a flood costs verification and nothing more.
func (s *Server) limited(c echo.Context, name string, start time.Time) error {
	s.metrics.Delivery(name, "rate_limited", time.Since(start).Seconds())
	c.Response().Header().Set("Retry-After", "1")
	return &HTTPError{Code: http.StatusTooManyRequests, Msg: "too many refused deliveries from this address"}
}

// receive handles one delivery and says what became of it.
func (s *Server) receive(c echo.Context, p provider.Provider) (deliveryOutcome, error) {
	limit, capName := s.cfg.MaxBodyBytes, "GUARDIAN_MAX_BODY_BYTES"
	if cp, ok := p.(provider.Capped); ok && cp.MaxBodyBytes() < limit {
		limit, capName = cp.MaxBodyBytes(), p.Name()+"'s own cap"
	}
	body, err := readCapped(c.Request().Body, limit)
	if err != nil {
		var tooLarge *errTooLarge
		if errors.As(err, &tooLarge) {
			o := refused(db.RefusedTooLarge, "body too large", fmt.Sprintf("the body exceeds %s (%d bytes)", capName, tooLarge.limit))
			return o, &HTTPError{Code: http.StatusRequestEntityTooLarge, Msg: o.answer, Err: err}
		}
		o := refused(db.RefusedUnreadable, "unreadable body", "the body could not be read: "+err.Error())
		return o, &HTTPError{Code: http.StatusBadRequest, Msg: o.answer, Err: err}
	}

	evs, err := provider.VerifyAll(p, c.Request().Header, body, s.now())
	if len(evs) > 0 && evs[0].ID != "" {
		trace.SpanFromContext(c.Request().Context()).SetAttributes(attribute.String("guardian.event_id", evs[0].ID), attribute.String("guardian.payment_id", evs[0].PaymentID))
	}
	if errors.Is(err, provider.ErrUnavailable) {
		// Not the sender's fault: nothing is stored, and it retries.
		return deliveryOutcome{kind: kindUnavailable}, &HTTPError{Code: http.StatusServiceUnavailable, Msg: provider.ErrUnavailable.Error(), Err: err}
	}
	if err != nil {
		o := verificationRefusal(err)
		return o, &HTTPError{Code: http.StatusBadRequest, Msg: o.answer, Err: err}
	}

	ctx, cancel := context.WithTimeout(c.Request().Context(), s.cfg.IntakeTimeout)
	defer cancel()
	results, err := s.acceptAll(ctx, evs)
	if errors.Is(err, db.ErrRebound) {
		o := refused(db.RefusedRebound, db.ErrRebound.Error(), "a second body under a signed transmission id: its signature binds the body only by CRC32")
		return o, &HTTPError{Code: http.StatusBadRequest, Msg: o.answer, Err: err}
	}
	if err != nil && c.Request().Context().Err() != nil {
		// The sender hung up first; it will retry. Nothing to answer.
		return deliveryOutcome{kind: kindClientGone}, c.NoContent(statusClientClosed)
	}
	if err != nil {
		// Not every event is known to be committed: the provider must
		// retry the delivery; what was stored answers as a duplicate then.
		return deliveryOutcome{kind: kindUnavailable}, &HTTPError{Code: http.StatusServiceUnavailable, Msg: "storage unavailable, retry later", Err: err}
	}
	answers := make([]webhookAnswer, len(evs))
	outcome := results[0].Outcome
	for i, res := range results {
		answers[i] = webhookAnswer{Status: "accepted", EventID: evs[i].ID}
		if res.Outcome != fulfilment.NewEvent {
			answers[i].Status = "duplicate"
		} else {
			outcome = res.Outcome // the delivery stored something new
		}
	}
	if len(answers) == 1 {
		return accepted(outcome), c.JSON(http.StatusOK, answers[0])
	}
	return accepted(outcome), c.JSON(http.StatusOK, batchAnswer{Events: answers})
}

// batchAnswer is the body of a 200 to a delivery of several events.
type batchAnswer struct {
	Events []webhookAnswer `json:"events"`
}

// acceptAll takes every event of one delivery through intake at once, so
// they share its group commits, and returns their results in order. An
// error means at least one was not stored.
func (s *Server) acceptAll(ctx context.Context, evs []provider.Event) ([]fulfilment.AcceptResult, error) {
	results := make([]fulfilment.AcceptResult, len(evs))
	if len(evs) == 1 {
		var err error
		results[0], err = s.cfg.Service.Accept(ctx, evs[0])
		return results, err
	}
	errs := make([]error, len(evs))
	var wg sync.WaitGroup
	for i, ev := range evs {
		wg.Go(func() { results[i], errs[i] = s.cfg.Service.Accept(ctx, ev) })
	}
	wg.Wait()
	return results, errors.Join(errs...)
}

type errTooLarge struct{ limit int64 }

func (e *errTooLarge) Error() string { return "body exceeds the size cap" }

// readCapped reads all of r, or fails once more than limit bytes arrive.
func readCapped(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, &errTooLarge{limit: limit}
	}
	return b, nil
}
