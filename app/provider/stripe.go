package provider

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"
)

// StripeConfig configures Stripe verification.
type StripeConfig struct {
	// Secrets are the endpoint signing secrets ("whsec_..."). A delivery
	// verifies if any of them produced one of its v1 signatures, so a secret
	// can be rotated without losing deliveries. At least one is required.
	Secrets []string
	// Tolerance bounds the signed timestamp's distance from now, both ways.
	// Defaults to DefaultTolerance.
	Tolerance time.Duration
	// FulfilTypes are the event types that pay for a fulfilment. Defaults to
	// DefaultStripeFulfilTypes.
	FulfilTypes []string
}

// DefaultStripeFulfilTypes are the Stripe events that fulfil a payment. Both
// arrive for one Checkout purchase and name the same payment intent, so the
// purchase fulfils once.
var DefaultStripeFulfilTypes = []string{"checkout.session.completed", "payment_intent.succeeded"}

// Stripe verifies Stripe's Stripe-Signature scheme with stripe-go's webhook
// package and reads Stripe's event envelope.
type Stripe struct {
	secrets     []string
	tolerance   time.Duration
	fulfilTypes []string
}

// NewStripe returns a Stripe provider, or an error if no usable secret is given.
func NewStripe(cfg StripeConfig) (*Stripe, error) {
	secrets, err := cleanSecrets(cfg.Secrets)
	if err != nil {
		return nil, fmt.Errorf("stripe: %w", err)
	}
	if cfg.Tolerance < 0 {
		return nil, errors.New("stripe: tolerance must not be negative")
	}
	return &Stripe{
		secrets:     secrets,
		tolerance:   cmp.Or(cfg.Tolerance, DefaultTolerance),
		fulfilTypes: orDefault(cfg.FulfilTypes, DefaultStripeFulfilTypes),
	}, nil
}

// Name returns "stripe".
func (s *Stripe) Name() string { return "stripe" }

// Verify checks the Stripe-Signature header and reads the event.
//
// stripe-go verifies the HMAC (ignoring its own tolerance, which rejects only
// old timestamps); Guardian checks the timestamp both ways itself and parses
// the JSON itself, because stripe-go's ConstructEvent rejects events whose
// API version differs from the library's.
func (s *Stripe) Verify(header http.Header, body []byte, now time.Time) (Event, error) {
	sig := header.Get("Stripe-Signature")
	signedAt, ok := stripeTimestamp(sig)
	if !ok {
		return Event{}, fmt.Errorf("%w: missing or unreadable Stripe-Signature header", ErrSignature)
	}
	verified := false
	for _, secret := range s.secrets {
		if webhook.ValidatePayloadIgnoringTolerance(body, sig, secret) == nil {
			verified = true
			break
		}
	}
	if !verified {
		return Event{}, ErrSignature
	}
	if err := checkTimestamp(signedAt, now, s.tolerance); err != nil {
		return Event{}, err
	}

	var env struct {
		ID   string `json:"id"`
		Type string `json:"type"`
		Data struct {
			Object map[string]any `json:"object"`
		} `json:"data"`
	}
	if err := decodeStrict(body, &env); err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if env.ID == "" || len(env.ID) > maxIDLength || env.Type == "" {
		return Event{}, fmt.Errorf("%w: id and type are required", ErrMalformed)
	}
	ev := Event{Provider: s.Name(), ID: env.ID, Type: env.Type, Payload: body}
	if !slices.Contains(s.fulfilTypes, env.Type) {
		return ev, nil
	}
	ev.PaymentID = stripePaymentID(env.Data.Object)
	if ev.PaymentID == "" || len(ev.PaymentID) > maxIDLength {
		return Event{}, fmt.Errorf("%w: %s without a payment id in data.object", ErrMalformed, env.Type)
	}
	return ev, nil
}

// stripePaymentID names the payment an object pays for: its payment intent
// when it has one (a Checkout Session), else its own id (a PaymentIntent).
func stripePaymentID(object map[string]any) string {
	switch pi := object["payment_intent"].(type) {
	case string:
		if pi != "" {
			return pi
		}
	case map[string]any: // an expanded PaymentIntent
		if id, ok := pi["id"].(string); ok && id != "" {
			return id
		}
	}
	id, _ := object["id"].(string)
	return id
}

// stripeTimestamp reads t= from a Stripe-Signature header.
func stripeTimestamp(header string) (time.Time, bool) {
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if ok && k == "t" {
			sec, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return time.Time{}, false
			}
			return time.Unix(sec, 0), true
		}
	}
	return time.Time{}, false
}

func cleanSecrets(secrets []string) ([]string, error) {
	var out []string
	for _, s := range secrets {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no signing secret configured")
	}
	return out, nil
}
