package provider

import (
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// StandardConfig configures Standard Webhooks verification.
type StandardConfig struct {
	// Secrets are the signing secrets ("whsec_" and base64). A delivery
	// verifies if any of them produced one of its signatures. At least one is
	// required.
	Secrets []string
	// Tolerance bounds the signed timestamp's distance from now, both ways.
	// Defaults to DefaultTolerance.
	Tolerance time.Duration
	// FulfilTypes are the event types that pay for a fulfilment. Defaults to
	// DefaultStandardFulfilTypes.
	FulfilTypes []string
	// PaymentPath is the dotted path of the payment identity in the body,
	// a string (e.g. "data.object.payment.id"). Defaults to
	// DefaultStandardPaymentPath.
	PaymentPath string
	// RefundTypes are the event types that say the payment at PaymentPath
	// was refunded in full (the sender's word: Standard Webhooks defines no
	// refund). Defaults to DefaultStandardRefundTypes.
	RefundTypes []string
}

// DefaultStandardRefundTypes are the Standard Webhooks event types that
// refund a payment in full.
var DefaultStandardRefundTypes = []string{"payment.refunded"}

// DefaultStandardPaymentPath is where a Standard Webhooks body names its
// payment by default: {"type": ..., "data": {"payment_id": ...}}.
const DefaultStandardPaymentPath = "data.payment_id"

// DefaultStandardFulfilTypes are the Standard Webhooks event types that
// fulfil a payment.
var DefaultStandardFulfilTypes = []string{"payment.succeeded"}

// Standard verifies the Standard Webhooks scheme (webhook-id,
// webhook-timestamp, webhook-signature) with the scheme's reference library.
// Its body is {"type": ..., "data": {"payment_id": ...}}.
type Standard struct {
	keys        [][]byte
	tolerance   time.Duration
	fulfilTypes []string
	refundTypes []string
	paymentPath []string
}

// NewStandard returns a Standard provider, or an error if a secret is missing
// or is not "whsec_" followed by base64.
func NewStandard(cfg StandardConfig) (*Standard, error) {
	secrets, err := cleanSecrets(cfg.Secrets)
	if err != nil {
		return nil, fmt.Errorf("standard webhooks: %w", err)
	}
	path := strings.Split(cmp.Or(cfg.PaymentPath, DefaultStandardPaymentPath), ".")
	if slices.Contains(path, "") {
		return nil, fmt.Errorf("standard webhooks: payment path %q is not a dotted path like data.payment_id", cfg.PaymentPath)
	}
	s := &Standard{
		tolerance:   cmp.Or(cfg.Tolerance, DefaultTolerance),
		fulfilTypes: orDefault(cfg.FulfilTypes, DefaultStandardFulfilTypes),
		refundTypes: orDefault(cfg.RefundTypes, DefaultStandardRefundTypes),
		paymentPath: path,
	}
	for i, secret := range secrets {
		key, err := StandardSecret(secret)
		if err != nil {
			return nil, fmt.Errorf("standard webhooks: secret %d is %w", i+1, err)
		}
		s.keys = append(s.keys, key)
	}
	if cfg.Tolerance < 0 {
		return nil, errors.New("standard webhooks: tolerance must not be negative")
	}
	return s, nil
}

// Name returns "standard".
func (s *Standard) Name() string { return "standard" }

// Verify checks the Standard Webhooks headers and reads the event. The
// signature is the scheme's: the base64 HMAC-SHA256 of
// "<webhook-id>.<webhook-timestamp>.<body>", one of the header's
// space-separated "v1,<signature>" entries. It is computed over the body
// in place, never a copy of it, so an unsigned body costs one HMAC pass;
// the scheme's reference library, which signs in the tests, made a copy of
// the signed string per secret. Guardian checks the timestamp itself, both
// ways.
func (s *Standard) Verify(header http.Header, body []byte, now time.Time) (Event, error) {
	id, rawTS := header.Get(standardwebhooks.HeaderWebhookID), header.Get(standardwebhooks.HeaderWebhookTimestamp)
	ts, err := strconv.ParseInt(rawTS, 10, 64)
	sigs := standardSignatures(header.Get(standardwebhooks.HeaderWebhookSignature))
	if id == "" || err != nil || len(sigs) == 0 {
		return Event{}, fmt.Errorf("%w: missing or unreadable webhook-id, webhook-timestamp or webhook-signature", ErrSignature)
	}
	if !hmacSigned(s.keys, sigs, []byte(id), []byte{'.'}, []byte(rawTS), []byte{'.'}, body) {
		return Event{}, ErrSignature
	}
	if err := checkTimestamp(time.Unix(ts, 0), now, s.tolerance); err != nil {
		return Event{}, err
	}
	if len(id) > maxIDLength {
		return Event{}, fmt.Errorf("%w: webhook-id longer than %d", ErrMalformed, maxIDLength)
	}

	env, err := parseObject(body)
	if err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	typ, _ := env["type"].(string)
	if typ == "" {
		return Event{}, fmt.Errorf("%w: type is required", ErrMalformed)
	}
	if hasNUL(id, typ) {
		return Event{}, errNUL
	}
	return s.mapEnvelope(Event{Provider: s.Name(), ID: id, Type: typ, Payload: body}, env), nil
}

// standardSignatures reads a webhook-signature header's v1 signatures
// (space-separated "v1,<base64>"; other versions are skipped); none for a
// header too long to be real.
func standardSignatures(header string) [][]byte {
	if len(header) > 4096 {
		return nil
	}
	var out [][]byte
	for _, part := range strings.Fields(header) {
		v, sig, ok := strings.Cut(part, ",")
		if !ok || v != "v1" {
			continue
		}
		if b, err := base64.StdEncoding.DecodeString(sig); err == nil && len(b) == sha256.Size {
			out = append(out, b)
		}
	}
	return out
}

// Map applies the configured fulfilling types and payment path to a stored
// body (Mapper).
func (s *Standard) Map(eventType string, body []byte) (Event, error) {
	env, err := parseObject(body)
	if err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return s.mapEnvelope(Event{Provider: s.Name(), Type: eventType, Payload: body}, env), nil
}

// mapEnvelope names ev's payment when its type fulfils: the string at the
// payment path, or why there is none; and the payment a refund type
// refunds, at the same path.
func (s *Standard) mapEnvelope(ev Event, env map[string]any) Event {
	refund := slices.Contains(s.refundTypes, ev.Type)
	if !refund && !slices.Contains(s.fulfilTypes, ev.Type) {
		return ev
	}
	var at any = env
	for _, key := range s.paymentPath {
		m, _ := at.(map[string]any)
		at = m[key]
	}
	pid, _ := at.(string)
	valid := pid != "" && len(pid) <= maxIDLength && !hasNUL(pid)
	switch {
	case refund && valid:
		ev.Reversal = &Reversal{PaymentID: pid, Kind: Refund, Full: true}
		return ev
	case refund:
		ev.Note = "no string payment id at " + strings.Join(s.paymentPath, ".") + ": a refund Guardian cannot match to a payment"
		return ev
	}
	if !valid {
		// Well signed, so stored and acknowledged; it cannot fulfil.
		ev.Unmapped = "no string payment id at " + strings.Join(s.paymentPath, ".")
		return ev
	}
	ev.PaymentID = pid
	return ev
}
