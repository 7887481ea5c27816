// Package contract is the wire contract between Guardian and a
// merchant's receiver (docs/receivers.md): the request body Guardian
// sends, the statement a receiver answers with, how both are signed with
// the connector secret (Standard Webhooks), and what marks a test
// delivery. Guardian's connector and the Go receiver kit (package
// receiver) both speak it; it imports nothing of Guardian's, so a
// merchant's service that imports the kit pulls in none of Guardian.
package contract

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// ActionRevoke is the body's "action" of a request that takes a fulfilled
// payment back; a fulfilment's body has none, so its bytes are what they
// always were.
const ActionRevoke = "revoke"

// HeaderAttempt carries the attempt number. It is not in the body: every
// attempt under a key sends the same bytes.
const HeaderAttempt = "Guardian-Attempt"

// The size of a request: the event's payload as the provider sent it,
// which intake capped, inside an envelope of at most EnvelopeBytes (the key,
// the provider, ids and type of at most 255 bytes each, JSON-escaped). A
// receiver that accepts MaxRequestBytes(the intake cap) accepts every
// request for an event Guardian acknowledged: the Go kit does by default,
// and docs/receivers.md says so for every other.
const (
	// DefaultMaxPayloadBytes is intake's default cap on a webhook body
	// (GUARDIAN_MAX_BODY_BYTES): 1 MiB.
	DefaultMaxPayloadBytes = 1 << 20
	// EnvelopeBytes bounds what a request adds around its payload: 8 KiB.
	EnvelopeBytes = 8 << 10
)

// MaxRequestBytes is the largest request body Guardian sends for payloads
// of at most payloadCap bytes.
func MaxRequestBytes(payloadCap int64) int64 { return payloadCap + EnvelopeBytes }

// Body is the JSON body of every request under one key.
type Body struct {
	IdempotencyKey string `json:"idempotency_key"`
	Provider       string `json:"provider"`
	PaymentID      string `json:"payment_id"`
	EventID        string `json:"event_id"`
	EventType      string `json:"event_type"`
	// Action is "revoke" for taking a payment back; absent for a
	// fulfilment, so a fulfilment's body is what it always was.
	Action string `json:"action,omitempty"`
	// ActionName names what the purchase pays for that this request
	// performs or takes back ("licence", "welcome_email": the actions file
	// names them); Purchase is the purchase in one shape whatever the
	// provider (docs/receivers.md). Both are absent for a deployment
	// without an actions file, whose bodies are what they always were.
	ActionName string          `json:"action_name,omitempty"`
	Purchase   json.RawMessage `json:"purchase,omitempty"`
	// Payload is the provider's signed event, byte for byte. It is last:
	// Guardian writes it after the rest (connector.EncodeRequest).
	Payload json.RawMessage `json:"payload"`
}

// The statuses a receiver states about a key (docs/receivers.md).
const (
	// StatusDone: the action for the key was done.
	StatusDone = "done"
	// StatusNotDone: the receiver has no record of the key and nothing is
	// running for it. Only in a lookup's answer.
	StatusNotDone = "not_done"
	// StatusInProgress: a request with the key is being processed.
	StatusInProgress = "in_progress"
	// StatusDeclined: the receiver declined the key, for good.
	StatusDeclined = "declined"
	// StatusMismatch: the key was used before with another body (the IETF
	// draft's 422); nothing was done for this request.
	StatusMismatch = "mismatch"
)

// Statement is a receiver's word about one idempotency key: the JSON body
// of a lookup's answer, and of an action's answer from a receiver that
// keeps the contract (docs/receivers.md). It counts only when signed with
// the connector secret (Standard Webhooks headers) and fresh.
type Statement struct {
	IdempotencyKey string `json:"idempotency_key"`
	// Status is one of the Status constants; anything else means "cannot
	// tell".
	Status string `json:"status"`
	// Reason says why a key was declined, for the operator.
	Reason string `json:"reason,omitempty"`
	// Receipt names the one act done for the key: the same in every answer
	// about a done key (the stored answer is replayed), a new one for every
	// act. The conformance run tells two acts apart by it.
	Receipt string `json:"receipt,omitempty"`
}

// SignStatement makes a receiver's signed statement: the JSON body and the
// Standard Webhooks headers that sign it with the connector secret. A
// receiver writes the headers, then the body.
func SignStatement(secret string, st Statement, now time.Time) ([]byte, http.Header, error) {
	signer, err := NewSigner(secret)
	if err != nil {
		return nil, nil, err
	}
	body, err := json.Marshal(st)
	if err != nil {
		return nil, nil, err
	}
	h, err := SignHeaders(signer, st.IdempotencyKey+".answer", body, now)
	if err != nil {
		return nil, nil, err
	}
	h.Set("Content-Type", "application/json")
	return body, h, nil
}

// NewSigner returns the Standard Webhooks signer for a connector secret,
// or an error that says what is wrong with it (and never the secret).
func NewSigner(secret string) (*standardwebhooks.Webhook, error) {
	if secret == "" {
		return nil, errors.New("connector secret is required (whsec_ followed by base64)")
	}
	key, err := DecodeSecret(secret)
	if err != nil {
		return nil, fmt.Errorf("connector secret is malformed: %w", err)
	}
	return standardwebhooks.NewWebhookRaw(key)
}

// SignHeaders returns the Standard Webhooks headers that sign body under
// msgID at now: one reading of the clock for both the signature and its
// header (two readings straddling a second would sign one timestamp and
// send another, and the other side would refuse a good message).
func SignHeaders(signer *standardwebhooks.Webhook, msgID string, body []byte, now time.Time) (http.Header, error) {
	sig, err := signer.Sign(msgID, now, body)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set(standardwebhooks.HeaderWebhookID, msgID)
	h.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	h.Set(standardwebhooks.HeaderWebhookSignature, sig)
	return h, nil
}

// Tolerance is how far a signed timestamp may be from the receiver's
// clock, either way, for the message to be fresh (Standard Webhooks' five
// minutes).
const Tolerance = 5 * time.Minute

// Fresh reports whether a message's webhook-timestamp header is a Unix
// time within Tolerance of now, either way: a signature over an older one
// is a replay, over a later one a forgery of the future.
func Fresh(header http.Header, now time.Time) bool {
	sec, err := strconv.ParseInt(header.Get(standardwebhooks.HeaderWebhookTimestamp), 10, 64)
	if err != nil {
		return false
	}
	at := time.Unix(sec, 0)
	return now.Sub(at) <= Tolerance && at.Sub(now) <= Tolerance
}

// WriteStatement answers with st, signed with secret at now, and status
// code: what a Go receiver writes for every answer that states something
// about a key.
func WriteStatement(w http.ResponseWriter, secret string, code int, st Statement, now time.Time) error {
	body, h, err := SignStatement(secret, st, now)
	if err != nil {
		http.Error(w, "could not sign the answer", http.StatusInternalServerError)
		return err
	}
	for k, v := range h {
		w.Header()[k] = v
	}
	w.WriteHeader(code)
	_, err = w.Write(body)
	return err
}

// TestEventType is the event type of a conformance run's deliveries. A
// receiver keeping the contract never performs the merchant's action for
// it: it records the key like any other and acts on nothing
// (docs/receivers.md, "Test deliveries").
const TestEventType = "guardian.connector.test"

// TestKeyPrefix starts every key a conformance run sends, and no key
// Guardian derives from a payment.
const TestKeyPrefix = "gtest_"

// TestPaymentID is the payment a test delivery names: none.
const TestPaymentID = "guardian-connector-test"

// TestPayload is the payload of a test delivery: what the receiver's test
// action does instead of acting.
type TestPayload struct {
	// HoldMillis keeps the key in progress this long (at most 10 s) before
	// finishing it, so the run can see it in progress.
	HoldMillis int `json:"hold_ms,omitempty"`
	// Decline makes the receiver decline the key.
	Decline bool `json:"decline,omitempty"`
	// Variant changes the body without changing anything else, to send a
	// key again with another body.
	Variant int `json:"variant,omitempty"`
}

// ErrSecretFormat means a Standard Webhooks secret is not "whsec_"
// followed by base64. Its text names no secret.
var ErrSecretFormat = errors.New("not whsec_ followed by base64")

// DecodeSecret decodes a Standard Webhooks secret ("whsec_" and base64)
// to its key, or returns ErrSecretFormat.
func DecodeSecret(secret string) ([]byte, error) {
	raw, ok := strings.CutPrefix(secret, "whsec_")
	if !ok || raw == "" {
		return nil, ErrSecretFormat
	}
	key, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return nil, ErrSecretFormat
	}
	return key, nil
}
