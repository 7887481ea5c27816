package provider

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/guardian-pay/guardian/app/settings"
)

// Adyen's capture settings: when a payment counts as paid.
const (
	// AdyenCaptureAutomatic: a successful AUTHORISATION is paid, the
	// merchant account capturing it at once (Adyen's default).
	AdyenCaptureAutomatic = "automatic"
	// AdyenCaptureManual: a successful CAPTURE is paid; an authorisation
	// alone may still be cancelled or expire.
	AdyenCaptureManual = "manual"
)

// maxAdyenItems bounds one delivery's notification items. Adyen's JSON
// webhooks carry one; a batch larger than this is not Adyen's.
const maxAdyenItems = 100

// AdyenConfig configures Adyen's verification and rules.
type AdyenConfig struct {
	// HMACKeys are the webhook's HMAC keys, hex, as the Customer Area shows
	// them. An item verifies if any of them produced its signature: list
	// the old and the new while rotating. At least one is required.
	HMACKeys []string
	// Capture is AdyenCaptureAutomatic (the default) or AdyenCaptureManual,
	// as the merchant account captures.
	Capture string
	// Mode is the money the deployment serves: a delivery whose "live"
	// says otherwise is refused (ErrMode). The zero Mode checks nothing.
	Mode Mode
}

// Adyen verifies Adyen's standard (payments) webhooks. A delivery carries
// notificationItems, each an event of its own, each signed on its own: the
// base64 HMAC-SHA256, keyed with the hex HMAC key, of eight of the item's
// fields joined by colons, in additionalData.hmacSignature. No time is
// signed: docs/security.md says what stops a replay. One item that fails
// refuses the whole delivery, so a delivery is stored whole or not at all.
//
// The rules, by Adyen's documentation (docs/design.md, the rule table): an
// event is known by eventCode and pspReference, and by success, so that an
// AUTHORISATION that failed and then succeeded for one payment is two
// events, not a duplicate; under automatic capture a successful
// AUTHORISATION fulfils its pspReference, under manual capture a
// successful CAPTURE fulfils the payment it names in originalReference;
// an item whose success is "false" (refused, failed) never fulfils. Each
// event's payload is its NotificationRequestItem, byte for byte as sent.
type Adyen struct {
	keys   [][]byte
	manual bool
	mode   Mode
}

// NewAdyen returns an Adyen provider, or an error if no key is given, a
// key is not hex, or the capture setting is unknown.
func NewAdyen(cfg AdyenConfig) (*Adyen, error) {
	keys, err := signingKeys("adyen", cfg.HMACKeys, func(k string) ([]byte, error) {
		key, err := hex.DecodeString(k)
		if err != nil || len(key) == 0 {
			return nil, errors.New("not hex, as the Customer Area shows an HMAC key")
		}
		return key, nil
	})
	if err != nil {
		return nil, err
	}
	if err := cfg.Mode.check("adyen"); err != nil {
		return nil, err
	}
	a := &Adyen{mode: cfg.Mode, keys: keys}
	switch cfg.Capture {
	case "", AdyenCaptureAutomatic:
	case AdyenCaptureManual:
		a.manual = true
	default:
		return nil, fmt.Errorf("adyen: capture %q is neither %s nor %s", cfg.Capture, AdyenCaptureAutomatic, AdyenCaptureManual)
	}
	return a, nil
}

// Name returns "adyen".
func (a *Adyen) Name() string { return "adyen" }

// Verify verifies a delivery of one notification item, as Adyen's JSON
// webhooks send, and returns its event. A delivery of several is
// ErrMalformed here: read it with VerifyBatch.
func (a *Adyen) Verify(header http.Header, body []byte, now time.Time) (Event, error) {
	evs, err := a.VerifyBatch(header, body, now)
	if err != nil {
		return Event{}, err
	}
	if len(evs) != 1 {
		return Event{}, fmt.Errorf("%w: %d notification items in one delivery", ErrMalformed, len(evs))
	}
	return evs[0], nil
}

// VerifyBatch verifies every notification item of a delivery and returns
// their events, in order (Batch). now is unused: the scheme signs no time.
//
// Verification reads the body once, as a stream of tokens, keeping only
// the signed fields, the signature and the reason of each item: no tree of
// an unverified body is built, and the first item whose signature fails
// ends the read, so a forged delivery costs a tokenizer's pass over at most
// its first item (and the body is capped at MaxBodyBytes before that).
func (a *Adyen) VerifyBatch(_ http.Header, body []byte, _ time.Time) ([]Event, error) {
	var evs []Event
	live, err := scanAdyen(body, func(i int, f adyenItem, raw []byte) error {
		if i >= maxAdyenItems {
			return fmt.Errorf("%w: notificationItems holds 1 to %d items", ErrMalformed, maxAdyenItems)
		}
		if err := f.check(); err != nil {
			return fmt.Errorf("%w: notificationItems[%d]: %v", ErrMalformed, i, err)
		}
		sig, err := base64.StdEncoding.DecodeString(f.signature)
		if err != nil || len(sig) != sha256.Size {
			return fmt.Errorf("%w: notificationItems[%d] has no readable additionalData.hmacSignature", ErrSignature, i)
		}
		if !hmacSigned(a.keys, [][]byte{sig}, []byte(f.signingString())) {
			return fmt.Errorf("%w: notificationItems[%d]", ErrSignature, i)
		}
		id := f.eventCode + ":" + f.pspReference + ":" + f.success
		if len(id) > maxIDLength {
			return fmt.Errorf("%w: notificationItems[%d]'s eventCode and pspReference are too long to be real", ErrMalformed, i)
		}
		if hasNUL(id, f.originalReference) {
			return errNUL
		}
		evs = append(evs, a.rules(Event{Provider: a.Name(), ID: id, Type: f.eventCode, Payload: bytes.Clone(raw)}, f))
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return nil, fmt.Errorf("%w: notificationItems holds 1 to %d items", ErrMalformed, maxAdyenItems)
	}
	// "live" is not among the signed fields: an HMAC key serves one
	// environment, so the key decides the mode; live can only refuse, and
	// it catches a test key left in a live deployment's list
	// (docs/security.md).
	if live != "true" && live != "false" {
		return nil, fmt.Errorf("%w: live is %q, neither \"true\" nor \"false\"", ErrMalformed, truncate(live, 20))
	}
	if err := a.mode.refusal(live == "false", "a test notification", "a live notification", "a test webhook's HMAC key in GUARDIAN_ADYEN_HMAC_KEYS"); err != nil {
		return nil, err
	}
	return evs, nil
}

// MaxBodyBytes caps an Adyen delivery (Capped): Adyen's JSON webhooks
// carry one item of a few KiB.
func (a *Adyen) MaxBodyBytes() int64 { return adyenMaxBody }

// adyenMaxBody is Adyen's cap: room for maxAdyenItems items of 2 KiB.
const adyenMaxBody = 256 << 10

// Map applies Adyen's rules to a stored item (Mapper).
func (a *Adyen) Map(eventCode string, body []byte) (Event, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	f, err := scanAdyenItem(dec)
	if err == nil {
		err = f.check()
	}
	if err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return a.rules(Event{Provider: a.Name(), Type: eventCode, Payload: body}, f), nil
}

// rules applies the rule for "paid" to ev, and reads a reversal. Every
// field it decides on is signed (adyenItem).
func (a *Adyen) rules(ev Event, f adyenItem) Event {
	amount := minorMoney(f.value, f.currency)
	if stage, kind, full, ok := adyenReversal(ev.Type); ok {
		switch {
		case f.success != "true":
			ev.Note = strings.ToLower(ev.Type) + " did not succeed: nothing was taken back"
		case f.originalReference == "" || len(f.originalReference) > maxIDLength:
			ev.Note = "names no originalReference: a reversal Guardian cannot match to a payment"
		default:
			ev.Reversal = &Reversal{PaymentID: f.originalReference, Kind: kind, Full: full, Stage: stage}
			if kind == Refund && !full {
				// A REFUND's amount is its own; its pspReference is the refund's.
				ev.Reversal.Amount, ev.Reversal.RefundID = amount, f.pspReference
			}
		}
		return ev
	}
	switch ev.Type {
	case "AUTHORISATION":
		switch {
		case f.success != "true":
			ev.Note = "authorisation refused: " + strconv.Quote(truncate(f.reason, 80))
		case f.value == "0":
			// A zero-amount authorisation saves a card or checks one: no purchase.
			ev.Note = "a zero-amount authorisation (a card saved or checked) pays for nothing"
		case a.manual:
			ev.Note = "authorised; under manual capture the CAPTURE fulfils"
		default:
			ev.PaymentID, ev.Paid = f.pspReference, amount
			ev.Purchase = adyenPurchase(ev, f)
		}
	case "CAPTURE":
		switch {
		case f.success != "true":
			ev.Note = "capture failed: " + strconv.Quote(truncate(f.reason, 80))
		case !a.manual:
			ev.Note = "captured; under automatic capture the AUTHORISATION fulfils"
		case f.value == "0":
			ev.Note = "a zero-amount capture pays for nothing"
		case f.originalReference == "" || len(f.originalReference) > maxIDLength:
			// Well signed, so stored and acknowledged; it cannot fulfil.
			ev.Unmapped = "a successful CAPTURE with no originalReference naming its payment"
		default:
			ev.PaymentID, ev.Paid = f.originalReference, amount
			ev.Purchase = adyenPurchase(ev, f)
		}
	}
	return ev
}

// adyenPurchase reads what a paying item's signed fields say of its
// purchase: the merchant's own reference, as metadata, beside the amount.
// The item's additionalData (metadata.*, shopper details) is not covered
// by Adyen's HMAC signature, so nothing of it reaches the purchase: a
// route decided on it would be decided by whoever relayed the item.
func adyenPurchase(ev Event, f adyenItem) *Purchase {
	p := basePurchase(ev)
	p.Metadata = metadata(map[string]any{"merchant_reference": f.merchantReference})
	return p
}

// adyenItem is what Guardian reads of a notification item: the eight
// signed fields, the signature, and the reason, which is unsigned and only
// ever quoted in a note. Nothing else of an item decides anything.
type adyenItem struct {
	pspReference, originalReference, merchantAccount, merchantReference string
	value, currency, eventCode, success                                 string
	signature, reason                                                   string
}

// adyenReversal names what an event code reverses, by Adyen's event
// reference: a refund (REFUND does not say whether it is the whole
// payment; CANCEL_OR_REFUND and CANCELLATION return all of it), or a
// dispute (NOTIFICATION_OF_CHARGEBACK opens one; CHARGEBACK takes the funds,
// as do SECOND_CHARGEBACK and PREARBITRATION_LOST; CHARGEBACK_REVERSED and
// PREARBITRATION_WON give them back).
func adyenReversal(eventCode string) (stage DisputeStage, kind ReversalKind, full, ok bool) {
	switch eventCode {
	case "REFUND":
		return "", Refund, false, true
	case "CANCEL_OR_REFUND", "CANCELLATION":
		return "", Refund, true, true
	case "NOTIFICATION_OF_CHARGEBACK":
		return DisputeOpened, Dispute, false, true
	case "CHARGEBACK", "SECOND_CHARGEBACK", "PREARBITRATION_LOST":
		return DisputeLost, Dispute, false, true
	case "CHARGEBACK_REVERSED", "PREARBITRATION_WON":
		return DisputeWon, Dispute, false, true
	}
	return "", "", false, false
}

// signingString is the string Adyen signs: the eight fields joined by
// colons, unescaped.
func (f adyenItem) signingString() string {
	return strings.Join([]string{f.pspReference, f.originalReference, f.merchantAccount, f.merchantReference,
		f.value, f.currency, f.eventCode, f.success}, ":")
}

// check refuses an item whose signed fields the unescaped join cannot tell
// apart from other fields under the same signature. Adyen never puts a
// colon in any of them but the merchant's own reference: its references
// are alphanumeric, account codes and event codes are names, the value an
// integer, the currency three letters. With the other seven colon-free,
// the string splits one way only, so the fields Guardian reads are the
// ones that were signed. It also requires what the rules read: eventCode,
// pspReference, success "true" or "false", an integer value and a currency.
func (f adyenItem) check() error {
	if f.eventCode == "" || f.pspReference == "" {
		return errors.New("eventCode and pspReference are required")
	}
	if f.success != "true" && f.success != "false" {
		return errors.New(`success is neither "true" nor "false"`)
	}
	if _, err := strconv.ParseInt(f.value, 10, 64); err != nil || strings.HasPrefix(f.value, "+") {
		return errors.New("amount.value is not an integer")
	}
	if !isCurrency(f.currency) {
		return errors.New("amount.currency is not a three-letter currency code")
	}
	for _, field := range []struct{ name, v string }{
		{"pspReference", f.pspReference}, {"originalReference", f.originalReference},
		{"merchantAccountCode", f.merchantAccount}, {"eventCode", f.eventCode},
	} {
		if strings.IndexByte(field.v, ':') >= 0 {
			return fmt.Errorf("%s holds a colon, which Adyen never sends there: the signed fields would not split one way", field.name)
		}
	}
	return nil
}

// scanAdyen reads a delivery as a stream of tokens and calls item with
// each NotificationRequestItem's fields and its bytes as sent, in order;
// an error from item ends the read. It returns the delivery's "live". The
// body must be one strict JSON object (no repeated names at any depth,
// valid UTF-8): jsontext checks that as it reads, also in what it skips.
// AdyenSigningStrings returns the string each notification item of an
// Adyen delivery is signed over, in order, as Adyen's HMAC takes them
// (its fields joined by ":").
func AdyenSigningStrings(body []byte) ([]string, error) {
	var out []string
	_, err := scanAdyen(body, func(_ int, f adyenItem, _ []byte) error {
		out = append(out, f.signingString())
		return nil
	})
	return out, err
}

func scanAdyen(body []byte, item func(i int, f adyenItem, raw []byte) error) (live string, err error) {
	bad := func(err error) (string, error) {
		if errors.Is(err, ErrSignature) || errors.Is(err, ErrMalformed) {
			return "", err
		}
		return "", fmt.Errorf("%w: %v", ErrMalformed, invalid(err))
	}
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	if err := expect(dec, '{'); err != nil {
		return bad(err)
	}
	n := 0
	for dec.PeekKind() == '"' {
		name, err := dec.ReadToken()
		if err != nil {
			return bad(err)
		}
		switch name.String() {
		case "live":
			tok, err := dec.ReadToken()
			if err != nil {
				return bad(err)
			}
			if tok.Kind() != '"' {
				return bad(errors.New("live is not a string"))
			}
			live = tok.String()
		case "notificationItems":
			if err := expect(dec, '['); err != nil {
				return bad(err)
			}
			for dec.PeekKind() == '{' {
				if err := expect(dec, '{'); err != nil {
					return bad(err)
				}
				found := false
				for dec.PeekKind() == '"' {
					field, err := dec.ReadToken()
					if err != nil {
						return bad(err)
					}
					if field.String() != "NotificationRequestItem" {
						if err := dec.SkipValue(); err != nil {
							return bad(err)
						}
						continue
					}
					start := dec.InputOffset()
					f, err := scanAdyenItem(dec)
					if err != nil {
						return bad(fmt.Errorf("%w: notificationItems[%d]: %v", ErrMalformed, n, err))
					}
					// start is just past the name: the item's bytes follow
					// the colon and any space.
					raw := bytes.TrimLeft(body[start:dec.InputOffset()], ": \t\r\n")
					if err := item(n, f, raw); err != nil {
						return "", err
					}
					found = true
					n++
				}
				if err := expect(dec, '}'); err != nil {
					return bad(err)
				}
				if !found {
					return bad(fmt.Errorf("%w: notificationItems[%d] holds no NotificationRequestItem object", ErrMalformed, n))
				}
			}
			if err := expect(dec, ']'); err != nil {
				return bad(err)
			}
		default:
			if err := dec.SkipValue(); err != nil {
				return bad(err)
			}
		}
	}
	if err := expect(dec, '}'); err != nil {
		return bad(err)
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return bad(errors.New("trailing data after JSON value"))
	}
	return live, nil
}

// scanAdyenItem reads one NotificationRequestItem object from dec: the
// signed fields, additionalData.hmacSignature and the reason, each a string
// where present (the amount's value an integer); everything else is
// skipped unread.
func scanAdyenItem(dec *jsontext.Decoder) (adyenItem, error) {
	var f adyenItem
	if err := expect(dec, '{'); err != nil {
		return f, err
	}
	fields := map[string]*string{
		"pspReference": &f.pspReference, "originalReference": &f.originalReference,
		"merchantAccountCode": &f.merchantAccount, "merchantReference": &f.merchantReference,
		"eventCode": &f.eventCode, "success": &f.success, "reason": &f.reason,
	}
	for dec.PeekKind() == '"' {
		name, err := dec.ReadToken()
		if err != nil {
			return f, err
		}
		key := name.String()
		switch {
		case fields[key] != nil:
			if *fields[key], err = scanString(dec, key); err != nil {
				return f, err
			}
		case key == "amount":
			if err := scanObject(dec, func(k string) error {
				switch k {
				case "value":
					tok, err := dec.ReadToken()
					if err != nil {
						return err
					}
					if tok.Kind() != '0' {
						return errors.New("amount.value is not an integer")
					}
					f.value = tok.String()
				case "currency":
					f.currency, err = scanString(dec, "amount.currency")
					return err
				default:
					return dec.SkipValue()
				}
				return nil
			}); err != nil {
				return f, err
			}
		case key == "additionalData":
			if dec.PeekKind() == 'n' {
				_, err = dec.ReadToken()
				if err != nil {
					return f, err
				}
				continue
			}
			if err := scanObject(dec, func(k string) error {
				if k != "hmacSignature" {
					return dec.SkipValue()
				}
				f.signature, err = scanString(dec, "additionalData.hmacSignature")
				return err
			}); err != nil {
				return f, err
			}
		default:
			if err := dec.SkipValue(); err != nil {
				return f, err
			}
		}
	}
	return f, expect(dec, '}')
}

// scanObject reads an object from dec, calling field for each name with
// the decoder at its value, which field must consume.
func scanObject(dec *jsontext.Decoder, field func(name string) error) error {
	if err := expect(dec, '{'); err != nil {
		return err
	}
	for dec.PeekKind() == '"' {
		name, err := dec.ReadToken()
		if err != nil {
			return err
		}
		if err := field(name.String()); err != nil {
			return err
		}
	}
	return expect(dec, '}')
}

// scanString reads a string or null (as "") from dec.
func scanString(dec *jsontext.Decoder, name string) (string, error) {
	tok, err := dec.ReadToken()
	if err != nil {
		return "", err
	}
	switch tok.Kind() {
	case '"':
		return tok.String(), nil
	case 'n':
		return "", nil
	}
	return "", fmt.Errorf("%s is not a string", name)
}

// expect reads one delimiter token of kind k from dec.
func expect(dec *jsontext.Decoder, k jsontext.Kind) error {
	tok, err := dec.ReadToken()
	if err != nil {
		return err
	}
	if tok.Kind() != k {
		return fmt.Errorf("expected %q, found %q", k, tok.Kind())
	}
	return nil
}

// Adyen's settings, and its registration: served when its HMAC keys are
// set.
var (
	adyenHMACKeys = settings.List(settings.Setting{
		Name: "GUARDIAN_ADYEN_HMAC_KEYS", Default: "unset (Adyen not served)", Secret: true,
		Doc: "Adyen webhook HMAC keys (64 hex characters), comma-separated",
	}, ",")
	adyenCapture = settings.OneOf(settings.Setting{
		Name: "GUARDIAN_ADYEN_CAPTURE", Default: "`automatic`",
		Doc: "`automatic`: a successful Adyen `AUTHORISATION` fulfils; `manual`: a successful `CAPTURE` does, as the merchant account captures",
	}, AdyenCaptureAutomatic, AdyenCaptureAutomatic, AdyenCaptureManual)
)

func init() {
	Register(Driver{Name: "adyen", Secrets: adyenHMACKeys, Open: func(env *settings.Env, c Common) (Provider, error) {
		// Every setting is read, so a bad one is named even when Adyen is
		// not served.
		keys, capture := adyenHMACKeys.Read(env), adyenCapture.Read(env)
		if len(keys) == 0 {
			return nil, nil
		}
		checkSecrets(env, c, adyenHMACKeys.Name, keys, AdyenHMACKey)
		return NewAdyen(AdyenConfig{HMACKeys: keys, Capture: capture, Mode: c.Mode})
	}})
}
