package web

import (
	"errors"
	"strings"

	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/db"
)

// outcomeKind is what became of one webhook request, in the few kinds the
// dashboard's chart and the trace's status tell apart.
type outcomeKind int

const (
	// kindStored: a new event, stored.
	kindStored outcomeKind = iota
	// kindDuplicateFilter: a duplicate the Redis filter caught.
	kindDuplicateFilter
	// kindDuplicatePostgres: a duplicate Postgres caught.
	kindDuplicatePostgres
	// kindRefused: refused before intake (4xx): signature, size, body.
	kindRefused
	// kindUnavailable: storage unavailable (503); the provider retries.
	kindUnavailable
	// kindClientGone: the sender left before the answer; it retries.
	kindClientGone
)

// deliveryOutcome is what became of one webhook request: one value that
// the metrics, the trace span, the refusal log, the server log and the
// dashboard's chart read, never a string parsed back by prefix.
type deliveryOutcome struct {
	kind outcomeKind
	// reason names a refusal (db.RefusalReasons).
	reason db.RefusalReason
	// answer is what the sender of a refused request was told, kept in
	// the refusal list; detail says more, for the server log. Neither
	// holds a secret or an expected signature.
	answer, detail string
}

// label is the outcome's name in guardian_deliveries_total and the trace.
func (o deliveryOutcome) label() string {
	switch o.kind {
	case kindStored:
		return fulfilment.NewEvent.String()
	case kindDuplicateFilter:
		return fulfilment.DuplicateFiltered.String()
	case kindDuplicatePostgres:
		return fulfilment.DuplicatePostgres.String()
	case kindRefused:
		return "rejected_" + string(o.reason)
	case kindUnavailable:
		return "unavailable"
	default:
		return "client_gone"
	}
}

// accepted is the outcome of a delivery intake took.
func accepted(o fulfilment.IntakeOutcome) deliveryOutcome {
	switch o {
	case fulfilment.DuplicateFiltered:
		return deliveryOutcome{kind: kindDuplicateFilter}
	case fulfilment.DuplicatePostgres:
		return deliveryOutcome{kind: kindDuplicatePostgres}
	default:
		return deliveryOutcome{kind: kindStored}
	}
}

func refused(reason db.RefusalReason, answer, detail string) deliveryOutcome {
	return deliveryOutcome{kind: kindRefused, reason: reason, answer: answer, detail: detail}
}

// verificationRefusal names a provider's verification error: the reason
// for metrics, what the sender is told, and the detail for the log. A
// signature or timestamp failure tells the sender only that; the log says
// which of them, and the detail of a malformed body is the sender's own.
func verificationRefusal(err error) deliveryOutcome {
	switch {
	case errors.Is(err, provider.ErrSignature):
		detail := "no configured secret matched the signature (a wrong or rotated secret?)"
		if _, why, ok := strings.Cut(err.Error(), ": "); ok {
			detail = why
		}
		return refused(db.RefusedSignature, provider.ErrSignature.Error(), detail)
	case errors.Is(err, provider.ErrTimestamp):
		return refused(db.RefusedTimestamp, provider.ErrTimestamp.Error(), "the signed timestamp is outside the tolerance window (a clock off, or a replay)")
	case errors.Is(err, provider.ErrMalformed):
		return refused(db.RefusedMalformed, err.Error(), err.Error())
	case errors.Is(err, provider.ErrMode):
		return refused(db.RefusedMode, err.Error(), err.Error())
	case errors.Is(err, provider.ErrNotServed):
		return refused(db.RefusedForeign, provider.ErrNotServed.Error(), err.Error())
	default:
		return refused(db.RefusedInvalid, "invalid delivery", "invalid delivery")
	}
}
