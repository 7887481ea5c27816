package web

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
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
		s.refuse(c, "unknown", "unknown_provider", err)
		return err
	}
	ctx, span := s.cfg.Tracer.Start(c.Request().Context(), "guardian.intake", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("guardian.provider", name)))
	c.SetRequest(c.Request().WithContext(ctx))
	outcome, err := s.receive(c, p)
	span.SetAttributes(attribute.String("guardian.outcome", outcome))
	if err != nil && !strings.HasPrefix(outcome, "rejected") {
		span.SetStatus(codes.Error, outcome)
	}
	span.End()
	s.metrics.Delivery(name, outcome, time.Since(start).Seconds())
	if reason, refused := strings.CutPrefix(outcome, "rejected_"); refused {
		s.refuse(c, name, reason, err)
	}
	s.activity.record(s.now(), outcome)
	return err
}

// receive handles one delivery and returns the outcome's name for metrics.
func (s *Server) receive(c echo.Context, p provider.Provider) (string, error) {
	body, err := readCapped(c.Request().Body, s.cfg.MaxBodyBytes)
	if err != nil {
		var tooLarge *errTooLarge
		if errors.As(err, &tooLarge) {
			return "rejected_too_large", &HTTPError{Code: http.StatusRequestEntityTooLarge, Msg: "body too large", Err: err}
		}
		return "rejected_unreadable", &HTTPError{Code: http.StatusBadRequest, Msg: "unreadable body", Err: err}
	}

	ev, err := p.Verify(c.Request().Header, body, s.now())
	if ev.ID != "" {
		trace.SpanFromContext(c.Request().Context()).SetAttributes(attribute.String("guardian.event_id", ev.ID), attribute.String("guardian.payment_id", ev.PaymentID))
	}
	if err != nil {
		reason, msg := rejection(err)
		return "rejected_" + reason, &HTTPError{Code: http.StatusBadRequest, Msg: msg, Err: err}
	}

	ctx, cancel := context.WithTimeout(c.Request().Context(), s.cfg.IntakeTimeout)
	defer cancel()
	res, err := s.cfg.Service.Accept(ctx, ev)
	if err != nil && c.Request().Context().Err() != nil {
		// The sender hung up first; it will retry. Nothing to answer.
		return "client_gone", c.NoContent(statusClientClosed)
	}
	if err != nil {
		// Nothing is known to be committed: the provider must retry.
		return "unavailable", &HTTPError{Code: http.StatusServiceUnavailable, Msg: "storage unavailable, retry later", Err: err}
	}
	status := "accepted"
	if res.Outcome != fulfilment.NewEvent {
		status = "duplicate"
	}
	return res.Outcome.String(), c.JSON(http.StatusOK, webhookAnswer{Status: status, EventID: ev.ID})
}

// rejection names a verification error for metrics and for the sender.
// Signature and timestamp failures say only that; a malformed body says what
// is wrong with it, which the sender wrote and may read.
func rejection(err error) (reason, msg string) {
	switch {
	case errors.Is(err, provider.ErrSignature):
		return "signature", provider.ErrSignature.Error()
	case errors.Is(err, provider.ErrTimestamp):
		return "timestamp", provider.ErrTimestamp.Error()
	case errors.Is(err, provider.ErrMalformed):
		return "malformed", err.Error()
	default:
		return "invalid", "invalid delivery"
	}
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
