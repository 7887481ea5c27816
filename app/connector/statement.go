package connector

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/guardian-pay/guardian/app/provider"
)

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

// maxStatement caps how much of an answer is read to find a statement.
const maxStatement = 16 << 10

// SignStatement makes a receiver's signed statement: the JSON body and the
// Standard Webhooks headers that sign it with the connector secret. A
// receiver writes the headers, then the body.
func SignStatement(secret string, st Statement, now time.Time) ([]byte, http.Header, error) {
	signer, err := newSigner(secret)
	if err != nil {
		return nil, nil, err
	}
	body, err := json.Marshal(st)
	if err != nil {
		return nil, nil, err
	}
	h, err := signHeaders(signer, st.IdempotencyKey+".answer", body, now)
	if err != nil {
		return nil, nil, err
	}
	h.Set("Content-Type", "application/json")
	return body, h, nil
}

// newSigner returns the Standard Webhooks signer for a connector secret,
// or an error that says what is wrong with it (and never the secret).
func newSigner(secret string) (*standardwebhooks.Webhook, error) {
	if secret == "" {
		return nil, errors.New("connector secret is required (whsec_ followed by base64)")
	}
	key, err := provider.StandardSecret(secret)
	if err != nil {
		return nil, fmt.Errorf("connector secret is malformed: %w", err)
	}
	return standardwebhooks.NewWebhookRaw(key)
}

// signHeaders returns the Standard Webhooks headers that sign body under
// msgID at now: one reading of the clock for both the signature and its
// header (two readings straddling a second would sign one timestamp and
// send another, and the other side would refuse a good message).
func signHeaders(signer *standardwebhooks.Webhook, msgID string, body []byte, now time.Time) (http.Header, error) {
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

// statement returns the signed statement about key in an answer, and
// false with a reason when the answer holds none: no body, not signed
// with the connector secret, stale, not a statement, or about another key.
func (c *HTTP) statement(body []byte, header http.Header, key string) (Statement, string) {
	if len(body) == 0 {
		return Statement{}, "no statement in the answer"
	}
	if err := c.signer.Verify(body, header); err != nil {
		return Statement{}, "answer not signed with the connector secret, or stale"
	}
	var st Statement
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil || st.IdempotencyKey != key {
		return Statement{}, "answer is not a statement about this key"
	}
	return st, ""
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
