package provider

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"
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
	keys, err := cleanSecrets(cfg.HMACKeys)
	if err != nil {
		return nil, fmt.Errorf("adyen: %w", err)
	}
	if err := cfg.Mode.check("adyen"); err != nil {
		return nil, err
	}
	a := &Adyen{mode: cfg.Mode}
	switch cfg.Capture {
	case "", AdyenCaptureAutomatic:
	case AdyenCaptureManual:
		a.manual = true
	default:
		return nil, fmt.Errorf("adyen: capture %q is neither %s nor %s", cfg.Capture, AdyenCaptureAutomatic, AdyenCaptureManual)
	}
	for i, k := range keys {
		key, err := hex.DecodeString(k)
		if err != nil || len(key) == 0 {
			return nil, fmt.Errorf("adyen: HMAC key %d is not hex, as the Customer Area shows it", i+1)
		}
		a.keys = append(a.keys, key)
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
func (a *Adyen) VerifyBatch(_ http.Header, body []byte, _ time.Time) ([]Event, error) {
	env, err := parseObject(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	list, _ := env["notificationItems"].([]any)
	if len(list) == 0 || len(list) > maxAdyenItems {
		return nil, fmt.Errorf("%w: notificationItems holds 1 to %d items", ErrMalformed, maxAdyenItems)
	}
	items := make([]map[string]any, len(list))
	for i, w := range list {
		wrapper, _ := w.(map[string]any)
		items[i], _ = wrapper["NotificationRequestItem"].(map[string]any)
		if items[i] == nil {
			return nil, fmt.Errorf("%w: notificationItems[%d] holds no NotificationRequestItem object", ErrMalformed, i)
		}
	}
	raws, err := adyenRawItems(body)
	if err != nil || len(raws) != len(items) {
		return nil, fmt.Errorf("%w: the notification items could not be read", ErrMalformed)
	}

	evs := make([]Event, len(items))
	for i, item := range items {
		f, err := readAdyenItem(item)
		if err != nil {
			return nil, fmt.Errorf("%w: notificationItems[%d]: %v", ErrMalformed, i, err)
		}
		extra, _ := item["additionalData"].(map[string]any)
		encoded, _ := extra["hmacSignature"].(string)
		sig, err := base64.StdEncoding.DecodeString(encoded)
		if err != nil || len(sig) != sha256.Size {
			return nil, fmt.Errorf("%w: notificationItems[%d] has no readable additionalData.hmacSignature", ErrSignature, i)
		}
		if !hmacSigned(a.keys, []byte(f.signingString()), sig) {
			return nil, fmt.Errorf("%w: notificationItems[%d]", ErrSignature, i)
		}
		id := f.eventCode + ":" + f.pspReference + ":" + f.success
		if len(id) > maxIDLength {
			return nil, fmt.Errorf("%w: notificationItems[%d]'s eventCode and pspReference are too long to be real", ErrMalformed, i)
		}
		if hasNUL(id, f.originalReference) {
			return nil, errNUL
		}
		evs[i] = a.rules(Event{Provider: a.Name(), ID: id, Type: f.eventCode, Payload: raws[i]}, f)
	}
	// "live" is not among the signed fields: an HMAC key serves one
	// environment, so a test key left in a live deployment's list is what
	// this catches (docs/security.md).
	live, _ := env["live"].(string)
	if live != "true" && live != "false" {
		return nil, fmt.Errorf("%w: live is %q, neither \"true\" nor \"false\"", ErrMalformed, truncate(live, 20))
	}
	if a.mode.refuses(live == "false") {
		if live == "false" {
			return nil, fmt.Errorf("%w: a test notification at a live deployment: is a test webhook's HMAC key in GUARDIAN_ADYEN_HMAC_KEYS?", ErrMode)
		}
		return nil, fmt.Errorf("%w: a live notification at a test deployment (GUARDIAN_MODE=test)", ErrMode)
	}
	return evs, nil
}

// Map applies Adyen's rules to a stored item (Mapper).
func (a *Adyen) Map(eventCode string, body []byte) (Event, error) {
	item, err := parseObject(body)
	if err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	f, err := readAdyenItem(item)
	if err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return a.rules(Event{Provider: a.Name(), Type: eventCode, Payload: body}, f), nil
}

// rules applies the rule for "paid" to ev, and reads a reversal.
func (a *Adyen) rules(ev Event, f adyenItem) Event {
	if stage, kind, full, ok := adyenReversal(ev.Type); ok {
		switch {
		case f.success != "true":
			ev.Note = strings.ToLower(ev.Type) + " did not succeed: nothing was taken back"
		case f.originalReference == "" || len(f.originalReference) > maxIDLength:
			ev.Note = "names no originalReference: a reversal Guardian cannot match to a payment"
		default:
			ev.Reversal = &Reversal{PaymentID: f.originalReference, Kind: kind, Full: full, Stage: stage}
		}
		return ev
	}
	switch ev.Type {
	case "AUTHORISATION":
		switch {
		case f.success != "true":
			ev.Note = "authorisation refused: " + strconv.Quote(truncate(f.reason, 80))
		case a.manual:
			ev.Note = "authorised; under manual capture the CAPTURE fulfils"
		default:
			ev.PaymentID = f.pspReference
		}
	case "CAPTURE":
		switch {
		case f.success != "true":
			ev.Note = "capture failed: " + strconv.Quote(truncate(f.reason, 80))
		case !a.manual:
			ev.Note = "captured; under automatic capture the AUTHORISATION fulfils"
		case f.originalReference == "" || len(f.originalReference) > maxIDLength:
			// Well signed, so stored and acknowledged; it cannot fulfil.
			ev.Unmapped = "a successful CAPTURE with no originalReference naming its payment"
		default:
			ev.PaymentID = f.originalReference
		}
	}
	return ev
}

// adyenItem is what Guardian reads of a notification item: the signed
// fields, and the reason for a note.
type adyenItem struct {
	pspReference, originalReference, merchantAccount, merchantReference string
	value, currency, eventCode, success                                 string
	reason                                                              string
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

// readAdyenItem reads an item's fields: eventCode, pspReference, success
// ("true" or "false") and an amount with an integer value are required;
// the references and the merchant account are strings where present.
func readAdyenItem(item map[string]any) (adyenItem, error) {
	str := func(name string) (string, error) {
		switch v := item[name].(type) {
		case nil:
			return "", nil
		case string:
			return v, nil
		}
		return "", fmt.Errorf("%s is not a string", name)
	}
	var f adyenItem
	var err error
	for _, field := range []struct {
		name string
		to   *string
	}{
		{"pspReference", &f.pspReference}, {"originalReference", &f.originalReference},
		{"merchantAccountCode", &f.merchantAccount}, {"merchantReference", &f.merchantReference},
		{"eventCode", &f.eventCode}, {"success", &f.success}, {"reason", &f.reason},
	} {
		if *field.to, err = str(field.name); err != nil {
			return adyenItem{}, err
		}
	}
	if f.eventCode == "" || f.pspReference == "" {
		return adyenItem{}, errors.New("eventCode and pspReference are required")
	}
	if f.success != "true" && f.success != "false" {
		return adyenItem{}, errors.New(`success is neither "true" nor "false"`)
	}
	amount, _ := item["amount"].(map[string]any)
	value, _ := amount["value"].(json.Number)
	if _, err := strconv.ParseInt(string(value), 10, 64); err != nil {
		return adyenItem{}, errors.New("amount.value is not an integer")
	}
	f.value = string(value)
	if f.currency, _ = amount["currency"].(string); f.currency == "" {
		return adyenItem{}, errors.New("amount.currency is required")
	}
	return f, nil
}

// adyenRawItems returns the bytes of each NotificationRequestItem of a
// delivery parseStrict accepted, in order.
func adyenRawItems(body []byte) ([][]byte, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	var raws [][]byte
	if _, err := dec.ReadToken(); err != nil { // {
		return nil, err
	}
	for dec.PeekKind() == '"' {
		name, err := dec.ReadToken()
		if err != nil {
			return nil, err
		}
		if name.String() != "notificationItems" {
			if err := dec.SkipValue(); err != nil {
				return nil, err
			}
			continue
		}
		if _, err := dec.ReadToken(); err != nil { // [
			return nil, err
		}
		for dec.PeekKind() == '{' {
			if _, err := dec.ReadToken(); err != nil {
				return nil, err
			}
			for dec.PeekKind() == '"' {
				field, err := dec.ReadToken()
				if err != nil {
					return nil, err
				}
				isItem := field.String() == "NotificationRequestItem"
				v, err := dec.ReadValue()
				if err != nil {
					return nil, err
				}
				if isItem {
					raws = append(raws, bytes.Clone(v))
				}
			}
			if _, err := dec.ReadToken(); err != nil { // }
				return nil, err
			}
		}
		if _, err := dec.ReadToken(); err != nil { // ]
			return nil, err
		}
	}
	return raws, nil
}
