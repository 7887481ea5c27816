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

	"github.com/guardian-pay/guardian/app/settings"
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
	keys, err := signingKeys("standard webhooks", cfg.Secrets, StandardSecret)
	if err != nil {
		return nil, err
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
		keys:        keys,
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
	ev.Purchase = standardPurchase(ev, env)
	return ev
}

// standardPurchase reads the purchase a Standard Webhooks sender states
// at data.purchase, in the shape Guardian sends receivers (kind, amount
// in minor units and currency, customer, items, metadata); its provider
// and id are always the event's own. Nil when the sender states none
// (PurchaseOf then gives its provider and payment alone).
func standardPurchase(ev Event, env map[string]any) *Purchase {
	data, _ := env["data"].(map[string]any)
	in, _ := data["purchase"].(map[string]any)
	if in == nil {
		return nil
	}
	p := basePurchase(ev)
	if k := Kind(text(in["kind"])); slices.Contains(Kinds, k) {
		p.Kind = k
	}
	if m := minorMoney(in["amount"], in["currency"]); m != nil {
		p.Amount, p.Currency = &m.Minor, m.Currency
	}
	c, _ := in["customer"].(map[string]any)
	p.Customer = customer(text(c["id"]), text(c["email"]))
	items, _ := in["items"].([]any)
	for _, i := range items {
		item, _ := i.(map[string]any)
		p.Items = addItem(p.Items, Item{Product: text(item["product"]), Price: text(item["price"]), Quantity: quantity(item["quantity"])})
	}
	p.Metadata = metadata(in["metadata"])
	return p
}

// Standard Webhooks' settings, and its registration: always served.
var (
	standardSecrets = settings.List(settings.Setting{
		Name: "GUARDIAN_STANDARD_SECRETS", Default: "required", Secret: true,
		Doc: "Standard Webhooks `whsec_` secrets (≥ 24 random bytes), space- or comma-separated",
	}, " ,")
	standardFulfilTypes = settings.List(settings.Setting{
		Name: "GUARDIAN_STANDARD_FULFIL_TYPES", Default: "`payment.succeeded`", Doc: "Standard Webhooks types that fulfil",
	}, ",")
	standardPaymentPath = settings.String(settings.Setting{
		Name: "GUARDIAN_STANDARD_PAYMENT_PATH", Default: "`data.payment_id`",
		Doc: "dotted path of the payment id (a string) in a Standard Webhooks body; an event of a fulfilling type without one is stored and acknowledged, not fulfilled",
	}, DefaultStandardPaymentPath)
	standardRefundTypes = settings.List(settings.Setting{
		Name: "GUARDIAN_STANDARD_REFUND_TYPES", Default: "`payment.refunded`",
		Doc: "Standard Webhooks types that refund the payment at the payment path in full (taken back under `GUARDIAN_REVOKE_ON`)",
	}, ",")
)

func init() {
	Register(Driver{Name: "standard", Secrets: standardSecrets, DevSecret: DevStandardSecret, Open: func(env *settings.Env, c Common) (Provider, error) {
		secrets := standardSecrets.Read(env)
		switch {
		case len(secrets) == 0 && c.Dev:
			secrets = []string{DevStandardSecret}
		case len(secrets) == 0:
			return nil, errors.New("GUARDIAN_STANDARD_SECRETS is empty: set the whsec_ signing secret(s), space- or comma-separated")
		}
		checkSecrets(env, c, standardSecrets.Name, secrets, StrongStandardSecret)
		return NewStandard(StandardConfig{Secrets: secrets, Tolerance: c.Tolerance, FulfilTypes: standardFulfilTypes.Read(env),
			PaymentPath: standardPaymentPath.Read(env), RefundTypes: standardRefundTypes.Read(env)})
	}})
}
