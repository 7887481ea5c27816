package connector

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/guardian-pay/guardian/app/state"
)

// TestEventType is the event type of a connector test request. A receiver
// must answer it without acting: it names no payment.
const TestEventType = "guardian.connector.test"

// TestPaymentID is the payment a connector test request names.
const TestPaymentID = "guardian-connector-test"

// ProbeStep is one request of a connector test and what its answer says.
type ProbeStep struct {
	// Name says what was sent.
	Name string
	// Status is the receiver's HTTP status; 0 when no answer came.
	Status int
	// Detail is the answer's evidence (a body excerpt, an error class).
	Detail map[string]any
	// OK is whether the answer is the one a correct receiver gives, and
	// Verdict says why in a sentence.
	OK      bool
	Verdict string
}

// ProbeOptions chooses what a connector test sends.
type ProbeOptions struct {
	// Signed also sends a correctly signed test request to the action URL
	// (event type TestEventType). Off by default: a receiver that does not
	// recognise test requests could act on it.
	Signed bool
}

// Probe tests the receiver without ever giving it a reason to act:
//
//   - the test request signed with a random secret: a receiver that
//     verifies signatures refuses it (401 or 403); one that accepts it would
//     act on anyone's request;
//   - with opts.Signed, the test request signed with the connector secret,
//     reporting the answer and how Guardian would classify it;
//   - when a lookup URL is configured, a signed lookup of the test request's
//     key, which a correct receiver answers "not done", signed.
func (c *HTTP) Probe(ctx context.Context, opts ProbeOptions) []ProbeStep {
	var id [8]byte
	_, _ = rand.Read(id[:])
	key := "guardian-test-" + hex.EncodeToString(id[:])
	req := Request{FulfilmentID: key, PaymentID: TestPaymentID, EventID: key, EventType: TestEventType, Payload: []byte(`{"test":true}`)}

	var secret [32]byte
	_, _ = rand.Read(secret[:])
	wrong, err := standardwebhooks.NewWebhook("whsec_" + base64.StdEncoding.EncodeToString(secret[:]))
	if err != nil {
		return []ProbeStep{{Name: "test request", Verdict: "could not make a test signature: " + err.Error()}}
	}
	impostor := *c
	impostor.signer = wrong
	steps := []ProbeStep{judgeWrongSignature(impostor.Fulfil(ctx, req))}
	if opts.Signed {
		steps = append(steps, judgeSigned(c.Fulfil(ctx, req)))
	}
	if c.CanLookup() {
		answer, evidence, err := c.Lookup(ctx, key)
		steps = append(steps, judgeLookup(answer, evidence, err))
	}
	return steps
}

func status(r Result) int {
	code, _ := r.Evidence["status"].(int)
	return code
}

func judgeWrongSignature(r Result) ProbeStep {
	s := ProbeStep{Name: "test request signed with a wrong secret", Status: status(r), Detail: r.Evidence}
	switch {
	case s.Status == 0:
		s.Verdict = "no answer: " + fmt.Sprint(r.Evidence["error"])
	case s.Status == http.StatusUnauthorized || s.Status == http.StatusForbidden:
		s.OK, s.Verdict = true, "refused: the receiver verifies signatures"
	case r.Outcome == state.Done:
		s.Verdict = "ACCEPTED: the receiver does not verify signatures, so anyone can make it act"
	case s.Status == http.StatusNotFound || s.Status == http.StatusMethodNotAllowed:
		s.Verdict = "not found: is GUARDIAN_CONNECTOR_URL the receiver's action endpoint?"
	default:
		s.Verdict = fmt.Sprintf("answered %d: cannot tell whether it checked the signature (a verifying receiver answers 401 or 403)", s.Status)
	}
	return s
}

func judgeSigned(r Result) ProbeStep {
	s := ProbeStep{Name: "test request signed with the connector secret", Status: status(r), Detail: r.Evidence}
	switch r.Outcome {
	case state.Done:
		s.OK, s.Verdict = true, "accepted: the receiver verified the signature"
	case state.NotDelivered:
		s.Verdict = fmt.Sprintf("refused before the receiver's logic (%d): a wrong secret, a clock off by minutes, or a wrong URL; Guardian would retry every payment", s.Status)
	case state.Rejected:
		s.OK, s.Verdict = true, fmt.Sprintf("refused with %d, a business refusal: the receiver verified the signature and declined the test event; Guardian would mark such a payment failed", s.Status)
	case state.NotSent:
		s.Verdict = "not sent: " + fmt.Sprint(r.Evidence["error"])
	default:
		s.Verdict = fmt.Sprintf("outcome unknown (%v): Guardian would park such a payment for reconciliation", r.Evidence["error"])
		if s.Status != 0 {
			s.Verdict = fmt.Sprintf("answered %d, outcome unknown: Guardian would park such a payment for reconciliation", s.Status)
		}
	}
	return s
}

func judgeLookup(a Answer, evidence map[string]any, err error) ProbeStep {
	s := ProbeStep{Name: "signed lookup of the test key", Detail: evidence}
	s.Status, _ = evidence["lookup_status"].(int)
	switch {
	case err != nil:
		s.Verdict = err.Error()
	case a == NotPerformed:
		s.OK, s.Verdict = true, "answered not done, signed: the reconciler can settle parked payments with this receiver"
	case a == Performed:
		s.Verdict = "answered DONE for a key never sent: the receiver's lookup cannot be trusted"
	default:
		s.Verdict = "cannot tell: the answer was not a signed lookup answer for this key, so parked payments wait for an operator"
		if why, ok := evidence["lookup_unverified"]; ok {
			s.Verdict += " (" + fmt.Sprint(why) + ")"
		}
	}
	return s
}
