package provider

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/guardian-pay/guardian/app/settings"
)

// LemonSqueezyConfig configures Lemon Squeezy's verification and rules.
type LemonSqueezyConfig struct {
	// Secrets are the webhook's signing secrets, as entered when it was
	// made. A delivery verifies if any of them produced its signature: list
	// the old and the new while rotating. At least one is required.
	Secrets []string
	// Mode is the money the deployment serves: an event whose
	// meta.test_mode says otherwise is refused (ErrMode). The zero Mode
	// checks nothing.
	Mode Mode
	// FulfilRenewals makes each paid renewal invoice of a subscription
	// (subscription_payment_success, billing_reason renewal) a purchase
	// of its own, the invoice, once. Off by default, as the other
	// providers' renewals are: the order that started it fulfils.
	FulfilRenewals bool
}

// LemonSqueezy verifies Lemon Squeezy's webhook deliveries: X-Signature is
// the hex HMAC-SHA256 of the exact body, keyed with the signing secret. The
// scheme signs no time, and a delivery carries no id of its own:
// docs/security.md says what stops a replay.
//
// The rules, by Lemon Squeezy's documentation (docs/design.md, the rule
// table): an event is known by its name and the version of its object
// (meta.event_name, data.type, data.id and data.attributes.updated_at), so
// a retry is a duplicate and a later change of the same subscription is
// not; order_created with data.attributes.status "paid" fulfils, its
// payment the order (data.id).
type LemonSqueezy struct {
	secrets        [][]byte
	mode           Mode
	fulfilRenewals bool
}

// LemonSqueezyFulfilEvent is the one Lemon Squeezy event that fulfils.
const LemonSqueezyFulfilEvent = "order_created"

// NewLemonSqueezy returns a Lemon Squeezy provider, or an error if no
// secret is given.
func NewLemonSqueezy(cfg LemonSqueezyConfig) (*LemonSqueezy, error) {
	secrets, err := signingKeys("lemonsqueezy", cfg.Secrets, nil)
	if err != nil {
		return nil, err
	}
	if err := cfg.Mode.check("lemonsqueezy"); err != nil {
		return nil, err
	}
	return &LemonSqueezy{mode: cfg.Mode, secrets: secrets, fulfilRenewals: cfg.FulfilRenewals}, nil
}

// Name returns "lemonsqueezy".
func (l *LemonSqueezy) Name() string { return "lemonsqueezy" }

// Verify checks X-Signature over the exact body and reads the event. now is
// unused: the scheme signs no time.
func (l *LemonSqueezy) Verify(header http.Header, body []byte, _ time.Time) (Event, error) {
	sig, err := hex.DecodeString(header.Get("X-Signature"))
	if err != nil || len(sig) != sha256.Size {
		return Event{}, fmt.Errorf("%w: missing or unreadable X-Signature header", ErrSignature)
	}
	if !hmacSigned(l.secrets, [][]byte{sig}, body) {
		return Event{}, ErrSignature
	}
	env, err := parseObject(body)
	if err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	meta, _ := env["meta"].(map[string]any)
	data, _ := env["data"].(map[string]any)
	attrs, _ := data["attributes"].(map[string]any)
	name, _ := meta["event_name"].(string)
	objType, _ := data["type"].(string)
	objID := idText(data["id"]) // a number still names the event; mapping flags it
	updated, _ := attrs["updated_at"].(string)
	if name == "" || objType == "" || objID == "" {
		return Event{}, fmt.Errorf("%w: meta.event_name, data.type and data.id are required", ErrMalformed)
	}
	id := strings.Join([]string{name, objType, objID, updated}, ":")
	if len(id) > maxIDLength {
		return Event{}, fmt.Errorf("%w: the event's name and object are too long to be real", ErrMalformed)
	}
	if hasNUL(id) {
		return Event{}, errNUL
	}
	if test, ok := meta["test_mode"].(bool); ok {
		if err := l.mode.refusal(test, "a test-mode event", "a live event", "a test-mode webhook's secret in GUARDIAN_LEMONSQUEEZY_SECRETS"); err != nil {
			return Event{}, err
		}
	}
	return l.rules(Event{Provider: l.Name(), ID: id, Type: name, Payload: body}, meta, data, attrs), nil
}

// Map applies Lemon Squeezy's rules to a stored body (Mapper).
func (l *LemonSqueezy) Map(eventName string, body []byte) (Event, error) {
	env, err := parseObject(body)
	if err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	meta, _ := env["meta"].(map[string]any)
	data, _ := env["data"].(map[string]any)
	attrs, _ := data["attributes"].(map[string]any)
	return l.rules(Event{Provider: l.Name(), Type: eventName, Payload: body}, meta, data, attrs), nil
}

// rules applies the rule for "paid" to ev: a paid order names itself, a
// paid renewal invoice too where renewals fulfil, anything else says why
// not.
func (l *LemonSqueezy) rules(ev Event, meta, data, attrs map[string]any) Event {
	if ev.Type == "order_refunded" {
		// The order refunded, whole ("refunded") or in part
		// ("partial_refund"), named as order_created named it.
		order, _ := data["id"].(string)
		status, _ := attrs["status"].(string)
		switch {
		case status != "refunded" && status != "partial_refund":
			ev.Note = "order_refunded with status " + strconv.Quote(status) + ": no refund Guardian knows"
		case order == "" || len(order) > maxIDLength || hasNUL(order):
			ev.Note = "no string order id at data.id: a reversal Guardian cannot match to a payment"
		default:
			ev.Reversal = &Reversal{PaymentID: order, Kind: Refund, Full: status == "refunded"}
		}
		return ev
	}
	if strings.HasPrefix(ev.Type, "subscription_payment_") {
		return lemonSqueezyInvoice(ev, data, attrs, l.fulfilRenewals)
	}
	if strings.HasPrefix(ev.Type, "subscription_") {
		return lemonSqueezySubscription(ev, data, attrs)
	}
	if ev.Type != LemonSqueezyFulfilEvent {
		return ev
	}
	order, _ := data["id"].(string)
	objType, _ := data["type"].(string)
	status, _ := attrs["status"].(string)
	switch {
	case status != "paid":
		ev.Note = "order status is " + strconv.Quote(status) + ", not paid"
	case objType != "orders" || order == "" || len(order) > maxIDLength || hasNUL(order):
		// Well signed, so stored and acknowledged; it cannot fulfil.
		ev.Unmapped = "no string order id at data.id of an orders object"
	default:
		ev.PaymentID = order
		ev.Purchase = lemonSqueezyPurchase(ev, meta, attrs)
	}
	return ev
}

// lemonSqueezySubscription reads a subscription event (docs/design.md,
// "Subscriptions"). subscription_created links the subscription to the
// order that started it (its order_id: the purchase order_created named).
// It ends when its status says expired (subscription_expired: a cancelled
// subscription's paid period over) or unpaid (payment recovery failed).
// A cancellation (subscription_cancelled, status cancelled) is no end: the
// subscription stays active until its ends_at, when it expires. A status
// past_due or paused suspends it, active or on_trial says it is active,
// at its updated_at. A subscription-invoices object (the
// subscription_payment_* events) names no subscription at data.id and is
// not read here.
func lemonSqueezySubscription(ev Event, data, attrs map[string]any) Event {
	id := idText(data["id"])
	if data["type"] != "subscriptions" || id == "" || len(id) > maxIDLength || hasNUL(id) {
		ev.Note = "names no subscription Guardian can read"
		return ev
	}
	status, _ := attrs["status"].(string)
	switch {
	case ev.Type == "subscription_created":
		order := idText(attrs["order_id"])
		if order == "" || len(order) > maxIDLength || hasNUL(order) {
			ev.Note = "subscription created by no order Guardian can read"
			return ev
		}
		ev.Subscription, ev.SubscriptionPurchase = id, order
	case status == "expired" || status == "unpaid":
		ev.Reversal = &Reversal{Kind: End, Subscription: id}
	case status == "cancelled":
		ev.Note = "subscription cancelled: it stays active until its ends_at, and ends when it expires"
	default:
		ev.Reversal, ev.Resumes, ev.Note = standing(id, status, "active", "on_trial")
	}
	if at, err := time.Parse(time.RFC3339Nano, text(attrs["updated_at"])); err == nil && (ev.Resumes != "" || ev.Reversal != nil) {
		ev.StandingAt = at
	}
	return ev
}

// lemonSqueezyInvoice reads a subscription invoice's event
// (subscription_payment_success, _recovered, _failed, _refunded: a
// subscription-invoices object): which subscription it bills and whether
// it is the first (billing_reason initial, paid with the order that
// started it) or a renewal, its payment being the invoice itself; a paid
// renewal is a purchase of its own where renewals fulfil (a recovered
// payment is the same invoice paid, so the same purchase); a refund of it
// names it (docs/design.md, "Subscriptions": the first invoice's refund
// reverses the order, a renewal's the renewal).
func lemonSqueezyInvoice(ev Event, data, attrs map[string]any, renewals bool) Event {
	invoice, sub := idText(data["id"]), idText(attrs["subscription_id"])
	if data["type"] != "subscription-invoices" || invoice == "" || sub == "" || len(invoice) > maxIDLength || len(sub) > maxIDLength || hasNUL(invoice, sub) {
		ev.Note = "names no subscription invoice Guardian can read"
		return ev
	}
	reason, _ := attrs["billing_reason"].(string)
	status, _ := attrs["status"].(string)
	ev.Invoice = &Invoice{ID: invoice, Payment: invoice, Subscription: sub, First: reason == "initial"}
	switch {
	case ev.Type == "subscription_payment_refunded" && (status == "refunded" || status == "partial_refund"):
		ev.Reversal = &Reversal{PaymentID: invoice, Kind: Refund, Full: status == "refunded"}
	case ev.Type == "subscription_payment_refunded":
		ev.Note = "subscription_payment_refunded with status " + strconv.Quote(truncate(status, 40)) + ": no refund Guardian knows"
	case status != "paid":
		ev.Note = "subscription invoice status is " + strconv.Quote(truncate(status, 40)) + ", not paid"
	case reason != "renewal":
		ev.Note = "a subscription invoice of billing_reason " + strconv.Quote(truncate(reason, 40)) + ": the order that started it, or a change, pays for no purchase of its own"
	case !renewals:
		ev.Note = "a subscription's renewal: renewals fulfil only when configured"
	default:
		ev.PaymentID = invoice
		ev.Paid = minorMoney(attrs["total"], attrs["currency"])
		p := basePurchase(ev)
		p.Kind = Renewal
		p.Customer = customer(text(attrs["customer_id"]), text(attrs["user_email"]))
		ev.Purchase = p
	}
	return ev
}

// lemonSqueezyPurchase reads what a paid order says was bought: its
// first_order_item (product, variant as the price, quantity), the
// checkout's custom data (meta.custom_data), the buyer's email, what it
// totalled, and its mode by meta.test_mode. An order does not say whether
// it starts a subscription (Lemon Squeezy sends order_created for both),
// so it names no kind.
func lemonSqueezyPurchase(ev Event, meta, attrs map[string]any) *Purchase {
	p := basePurchase(ev)
	if m := minorMoney(attrs["total"], attrs["currency"]); m != nil {
		p.Amount, p.Currency = &m.Minor, m.Currency
	}
	if test, ok := meta["test_mode"].(bool); ok {
		p.Mode = modeOf(test)
	}
	p.Metadata = metadata(meta["custom_data"])
	p.Customer = customer(text(attrs["customer_id"]), text(attrs["user_email"]))
	if item, ok := attrs["first_order_item"].(map[string]any); ok {
		p.Items = addItem(nil, Item{Product: text(item["product_id"]), Price: text(item["variant_id"]), Quantity: quantity(item["quantity"])})
	}
	return p
}

// idText reads an id that is a JSON string or number, as text.
func idText(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case json.Number:
		return string(v)
	}
	return ""
}

// Lemon Squeezy's setting, and its registration: served when its secrets
// are set.
var (
	lemonSqueezySecrets = settings.List(settings.Setting{
		Name: "GUARDIAN_LEMONSQUEEZY_SECRETS", Default: "unset (Lemon Squeezy not served)", Secret: true,
		Doc: "Lemon Squeezy signing secrets (24 to 40 characters), comma-separated",
	}, ",")
	lemonSqueezyFulfilRenewals = settings.Bool(settings.Setting{
		Name: "GUARDIAN_LEMONSQUEEZY_FULFIL_RENEWALS", Default: "`false`",
		Doc: "whether each paid renewal invoice of a Lemon Squeezy subscription (`subscription_payment_success`, `billing_reason` `renewal`) fulfils too",
	}, false)
)

func init() {
	Register(Driver{Name: "lemonsqueezy", Secrets: lemonSqueezySecrets, Open: func(env *settings.Env, c Common) (Provider, error) {
		secrets := lemonSqueezySecrets.Read(env)
		if len(secrets) == 0 {
			return nil, nil
		}
		checkSecrets(env, c, lemonSqueezySecrets.Name, secrets, LemonSqueezySecret)
		return NewLemonSqueezy(LemonSqueezyConfig{Secrets: secrets, Mode: c.Mode, FulfilRenewals: lemonSqueezyFulfilRenewals.Read(env)})
	}})
}
