// Package provider verifies payment providers' webhook deliveries and reads
// the event each one carries. A provider is a signature scheme plus a
// payload shape, in a file of its own that registers it (Register): its
// settings, how they build it, and so its route /webhooks/<name>.
// Nothing else in Guardian lists providers.
//
// Adding one is its file here, its testdata (the provider's own samples
// and signed vectors), its sample and signer in providertest (which
// web.TestEveryProviderConforms runs through the suite every provider
// passes, failing for a registered provider without one), its backfill in
// app/backfill when it has an events API, and its row in docs/design.md's
// rule table. The README's settings table follows from its registration.
package provider

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Event is a delivery whose signature checked out.
type Event struct {
	// Provider names the provider that signed the event ("stripe").
	Provider string
	// ID is the provider's event id; (Provider, ID) is unique.
	ID string
	// DeliveryID is the delivery's own id where the provider sends one
	// beside the event's (Shopify's X-Shopify-Webhook-Id); empty otherwise.
	// It is stored with the event as first delivered.
	DeliveryID string
	// Type is the provider's event type.
	Type string
	// Transmission is set where a provider's signature binds the body only
	// weakly (PayPal's, by CRC32): the signed transmission id and the
	// SHA-256 of the body as delivered. Intake binds the one to the other
	// the first time it sees them and refuses another body under the same
	// id. Nil for every other provider.
	Transmission *Transmission
	// PaymentID is the purchase the event pays for. It is set only when the
	// event fulfils under the provider's rules: a fulfilling type whose
	// payload says it is paid.
	PaymentID string
	// Note says why an event of a fulfilling type does not fulfil by the
	// provider's rules (not paid yet, failed, a renewal), for the log;
	// empty otherwise.
	Note string
	// Unmapped says why an event that says it is paid could not be mapped
	// to a payment (no payment id where the rules look, an id that is not a
	// string, a payment status Guardian does not know). Such an event is
	// stored, acknowledged and flagged for an operator: nothing paid goes
	// unseen. Empty otherwise.
	Unmapped string
	// Paid is what a paying event says was paid, from its signed fields;
	// nil where it does not say. A refund's share of the payment is
	// measured against it.
	Paid *Money
	// Purchase is what a paid event says was bought, where the provider
	// reads more than PurchaseOf's base (provider, payment, amount); nil
	// otherwise.
	Purchase *Purchase
	// ItemsRef names the provider's object whose items its API lists,
	// where a paid event lists none that its API would (a Stripe Checkout
	// Session's id): routes that match on products or prices have the
	// items fetched before they decide (fulfilment.ItemsSource). Empty
	// otherwise.
	ItemsRef string
	// Subscription names, by the provider's id, the subscription a paid
	// event starts: its purchase is the subscription's, and the events
	// that end the subscription (Reversal.Kind End) take it back. Empty
	// for a purchase that is not a subscription's start. An event that
	// does not pay may name it too, with SubscriptionPurchase: the
	// purchase the subscription's start paid for, where the provider's
	// signed event says so (Paddle's subscription.created names its
	// transaction). Either links the two, once.
	Subscription         string
	SubscriptionPurchase string
	// Resumes names, by the provider's id, a subscription the event says
	// is active (paid up, or no longer paused): a suspension in force
	// ends, and what it took back is granted again, once. Empty
	// otherwise. A suspension is a Reversal of kind Suspension.
	Resumes string
	// StandingAt is when the provider says a suspension or a resumption
	// held, from its signed fields: of two, the later decides, whatever
	// order they arrive in. Zero where the provider signs no time (they
	// are then taken in the order they arrive).
	StandingAt time.Time
	// Invoice is what the event says about one of a subscription's
	// invoices (its bill for a period): the subscription it bills and
	// whether it is the first, or the payment that paid it. A refund or a
	// dispute names that payment; through these facts Guardian finds the
	// purchase it paid for (docs/design.md, "Subscriptions"). Nil for an
	// event that says nothing of the kind.
	Invoice *Invoice
	// Reversal is set when the event refunds or disputes a payment, by the
	// provider's rules (a refund that did not go through is not one); nil
	// otherwise.
	Reversal *Reversal
	// Payload is the raw body as received, or, in a delivery of several
	// events (Batch), the event's own part of it, byte for byte.
	Payload []byte
	// Origin says how the event arrived: "" or "webhook" for a delivery,
	// "backfill" for one fetched from the provider's events API.
	Origin string
}

// Invoice is one of a subscription's invoices as an event states it: by
// its provider's id, the subscription it bills and whether it is the
// subscription's first (paid with the start, so a refund of it reverses
// the start's purchase) or a later one (a renewal: its own purchase, the
// invoice), and the payment that paid it (Stripe's payment intent). An
// event may state part of it (Stripe's invoice.paid names the
// subscription, its invoice_payment.paid the payment): Guardian joins the
// parts by the invoice.
type Invoice struct {
	ID string
	// Subscription is empty where the event does not say; First is then
	// meaningless.
	Subscription string
	First        bool
	// Payment is empty where the event does not say.
	Payment string
}

// Transmission is a signed transmission id and the digest of the body
// delivered under it.
type Transmission struct {
	ID         string
	BodySHA256 [32]byte
}

// Fulfils reports whether the event asks for a fulfilment.
func (e Event) Fulfils() bool { return e.PaymentID != "" }

// StartsSubscription returns the subscription the event links to the
// purchase its start paid for, and that purchase; empty when it links
// none.
func (e Event) StartsSubscription() (subscription, purchase string) {
	purchase = e.SubscriptionPurchase
	if purchase == "" && e.Fulfils() {
		purchase = e.PaymentID
	}
	if e.Subscription == "" || purchase == "" {
		return "", ""
	}
	return e.Subscription, purchase
}

// Provider verifies one provider's deliveries.
//
// Verify must be safe for concurrent use. It checks the signature over the
// exact bytes of body, the timestamp against now within the provider's
// tolerance both ways, and the payload's shape. Every error it returns wraps
// one of ErrSignature, ErrTimestamp, ErrMalformed, ErrMode, ErrNotServed or ErrUnavailable, whose text is fit to show
// the sender; the wrapping text never holds a secret or an expected
// signature.
type Provider interface {
	// Name is the provider's path segment and storage name ("stripe").
	Name() string
	Verify(header http.Header, body []byte, now time.Time) (Event, error)
}

// Batch is a provider one of whose deliveries may carry several events,
// each signed on its own (Adyen's notificationItems). VerifyBatch checks
// every event of the delivery and returns them in order; one that fails
// fails the delivery, so none of it is stored. Verify reads a delivery of
// one event.
type Batch interface {
	Provider
	VerifyBatch(header http.Header, body []byte, now time.Time) ([]Event, error)
}

// Capped is a provider whose deliveries are small (Adyen's): the web edge
// reads at most MaxBodyBytes of a delivery before verifying it, when that
// is below the deployment's own cap, so a forged body costs no more than a
// genuine one could.
type Capped interface {
	MaxBodyBytes() int64
}

// VerifyAll verifies a delivery and returns its events: a Batch provider's
// several, any other provider's one.
func VerifyAll(p Provider, header http.Header, body []byte, now time.Time) ([]Event, error) {
	if b, ok := p.(Batch); ok {
		return b.VerifyBatch(header, body, now)
	}
	ev, err := p.Verify(header, body, now)
	if err != nil {
		return []Event{ev}, err
	}
	return []Event{ev}, nil
}

// Mapper applies a provider's payment rules to a stored event's body, as
// they are configured now: an operator who fixed the configuration behind
// an unmapped event (a payment path, a fulfilling type) replays it, and
// the replay maps it again. Only the returned Event's PaymentID, Note and
// Unmapped are meaningful.
type Mapper interface {
	Map(eventType string, body []byte) (Event, error)
}

var (
	// ErrSignature means no configured secret produced the delivery's signature,
	// or the signature headers are missing or unreadable.
	ErrSignature = errors.New("bad signature")
	// ErrTimestamp means the signed timestamp is outside the tolerance, in
	// the past or in the future.
	ErrTimestamp = errors.New("timestamp outside tolerance")
	// ErrMalformed means the signed body is not an event this provider sends:
	// invalid or non-strict JSON, or a required field missing.
	ErrMalformed = errors.New("malformed event")
	// ErrMode means a well-signed event of the other mode: test money at a
	// live deployment, or live money at a test one (a test endpoint's
	// secret left in a live deployment's list, say). It never fulfils.
	ErrMode = errors.New("event of the other mode")
	// ErrUnavailable means the delivery could not be verified now, through
	// no fault of the sender's (PayPal's certificate host did not answer):
	// answered 503, so the provider retries, and nothing is stored.
	ErrUnavailable = errors.New("verification unavailable, retry later")
	// ErrNotServed means a well-signed delivery for an account this
	// deployment does not serve: another shop of a public Shopify app whose
	// client secret signs every shop's deliveries.
	ErrNotServed = errors.New("delivery for an account this deployment does not serve")
)

// Mode is the money a deployment serves: live or test. The zero Mode
// checks nothing (a provider whose events do not say).
type Mode string

// The modes.
const (
	ModeLive Mode = "live"
	ModeTest Mode = "test"
)

// check returns an error naming provider if m is neither a mode nor zero.
func (m Mode) check(provider string) error {
	if m != "" && m != ModeLive && m != ModeTest {
		return fmt.Errorf("%s: mode %q is neither live nor test", provider, m)
	}
	return nil
}

// refusal is the ErrMode refusal of an event whose own flag says test (or
// live) at a deployment serving m, or nil when m serves it: the zero Mode
// refuses nothing. what names the event as its provider does ("a test
// order", "a sandbox delivery"), and where says where the other mode's
// secret sits, the likely cause of a test event at a live deployment.
func (m Mode) refusal(test bool, testWhat, liveWhat, where string) error {
	switch {
	case m == "" || test == (m == ModeTest):
		return nil
	case test:
		return fmt.Errorf("%w: %s at a live deployment: is %s?", ErrMode, testWhat, where)
	}
	return fmt.Errorf("%w: %s at a test deployment (GUARDIAN_MODE=test)", ErrMode, liveWhat)
}

// DefaultTolerance is how far a signed timestamp may be from now, either way.
const DefaultTolerance = 300 * time.Second

// maxIDLength bounds event and payment ids: longer ones are not real.
const maxIDLength = 255

func checkTimestamp(signed, now time.Time, tolerance time.Duration) error {
	if d := now.Sub(signed); d > tolerance || d < -tolerance {
		return ErrTimestamp
	}
	return nil
}

func orDefault(list, def []string) []string {
	if len(list) == 0 {
		return def
	}
	return list
}

// signingKeys cleans a provider's secrets (each trimmed, empty ones
// dropped, at least one wanted) and decodes each to the key its HMAC
// takes: decode nil takes a secret's bytes as they are. An error names the
// provider and the secret's place in the list, never the secret.
func signingKeys(provider string, secrets []string, decode func(string) ([]byte, error)) ([][]byte, error) {
	cleaned, err := cleanSecrets(secrets)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", provider, err)
	}
	keys := make([][]byte, 0, len(cleaned))
	for i, s := range cleaned {
		key := []byte(s)
		if decode != nil {
			if key, err = decode(s); err != nil {
				return nil, fmt.Errorf("%s: secret %d is %w", provider, i+1, err)
			}
		}
		keys = append(keys, key)
	}
	return keys, nil
}

// hmacSigned reports whether any of secrets produced any of sigs, each an
// HMAC-SHA256 of parts written in order (the body alone in Shopify's scheme
// and Lemon Squeezy's; an item's signed fields in Adyen's; "ts:body" in
// Paddle's; "id.ts.body" in Standard Webhooks'), in constant time for each.
// The parts are hashed where they lie, never copied together.
func hmacSigned(secrets, sigs [][]byte, parts ...[]byte) bool {
	for _, secret := range secrets {
		mac := hmac.New(sha256.New, secret)
		for _, p := range parts {
			mac.Write(p)
		}
		want := mac.Sum(nil)
		for _, sig := range sigs {
			if hmac.Equal(sig, want) {
				return true
			}
		}
	}
	return false
}
