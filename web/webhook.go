package web

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/provider"
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
		s.refuse(c, "unknown", refused("unknown_provider", err.Msg, "no provider is served at "+c.Request().URL.Path))
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
	s.metrics.Delivery(name, outcome.label(), time.Since(start).Seconds())
	if outcome.kind == kindRefused {
		s.refuse(c, name, outcome)
	}
	s.activity.record(s.now(), name, outcome.kind)
	return err
}

// receive handles one delivery and says what became of it.
func (s *Server) receive(c echo.Context, p provider.Provider) (deliveryOutcome, error) {
	body, err := readCapped(c.Request().Body, s.cfg.MaxBodyBytes)
	if err != nil {
		var tooLarge *errTooLarge
		if errors.As(err, &tooLarge) {
			o := refused("too_large", "body too large", fmt.Sprintf("the body exceeds GUARDIAN_MAX_BODY_BYTES (%d)", tooLarge.limit))
			return o, &HTTPError{Code: http.StatusRequestEntityTooLarge, Msg: o.answer, Err: err}
		}
		o := refused("unreadable", "unreadable body", "the body could not be read: "+err.Error())
		return o, &HTTPError{Code: http.StatusBadRequest, Msg: o.answer, Err: err}
	}

	ev, err := p.Verify(c.Request().Header, body, s.now())
	if ev.ID != "" {
		trace.SpanFromContext(c.Request().Context()).SetAttributes(attribute.String("guardian.event_id", ev.ID), attribute.String("guardian.payment_id", ev.PaymentID))
	}
	if err != nil {
		o := verificationRefusal(err)
		return o, &HTTPError{Code: http.StatusBadRequest, Msg: o.answer, Err: err}
	}

	ctx, cancel := context.WithTimeout(c.Request().Context(), s.cfg.IntakeTimeout)
	defer cancel()
	res, err := s.cfg.Service.Accept(ctx, ev)
	if err != nil && c.Request().Context().Err() != nil {
		// The sender hung up first; it will retry. Nothing to answer.
		return deliveryOutcome{kind: kindClientGone}, c.NoContent(statusClientClosed)
	}
	if err != nil {
		// Nothing is known to be committed: the provider must retry.
		return deliveryOutcome{kind: kindUnavailable}, &HTTPError{Code: http.StatusServiceUnavailable, Msg: "storage unavailable, retry later", Err: err}
	}
	status := "accepted"
	if res.Outcome != fulfilment.NewEvent {
		status = "duplicate"
	}
	return accepted(res.Outcome), c.JSON(http.StatusOK, webhookAnswer{Status: status, EventID: ev.ID})
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
