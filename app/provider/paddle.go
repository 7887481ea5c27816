package provider

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/guardian-pay/guardian/app/settings"
)

// PaddleConfig configures Paddle Billing's verification and rules.
type PaddleConfig struct {
	// Secrets are the notification destination's secret keys
	// ("pdl_ntfset_..."), as Paddle shows them. A delivery verifies if any
	// of them produced one of its h1 signatures: list the old and the new
	// while rotating. At least one is required.
	Secrets []string
	// Tolerance bounds the signed ts's distance from now, both ways.
	// Defaults to DefaultTolerance. (Paddle's own SDKs allow 5 seconds into
	// the past only; a tighter tolerance is a configuration away.)
	Tolerance time.Duration
	// FulfilRenewals makes a subscription's recurring transactions fulfil,
	// each once. Off by default, as Stripe's renewals are: the purchase that
	// started the subscription fulfils; a renewal usually extends, not
	// provisions.
	FulfilRenewals bool
}

// Paddle verifies Paddle Billing notifications: the Paddle-Signature header
// "ts=<unix seconds>;h1=<hex HMAC-SHA256 of "<ts>:<body>" keyed with the
// secret>", with several h1 during a secret's rotation.
//
// The rules, by Paddle's documentation (docs/design.md, the rule table):
// events dedupe on event_id (notification_id changes per destination and
// replay); transaction.completed with data.status "completed" fulfils, its
// payment the transaction (data.id); transaction.paid never does (paid is
// not yet processed: Paddle says to provision on completed), nor does a
// transaction Paddle made for a payment method change or a subscription
// update. A zero-value transaction of a checkout (a free trial's start, a
// full discount) is a purchase, and fulfils.
type Paddle struct {
	secrets        [][]byte
	tolerance      time.Duration
	fulfilRenewals bool
}

// PaddleFulfilType is the one Paddle event type that fulfils.
const PaddleFulfilType = "transaction.completed"

// NewPaddle returns a Paddle provider, or an error if no secret is given.
func NewPaddle(cfg PaddleConfig) (*Paddle, error) {
	secrets, err := signingKeys("paddle", cfg.Secrets, nil)
	if err != nil {
		return nil, err
	}
	if cfg.Tolerance < 0 {
		return nil, errors.New("paddle: tolerance must not be negative")
	}
	return &Paddle{secrets: secrets, tolerance: cmp.Or(cfg.Tolerance, DefaultTolerance), fulfilRenewals: cfg.FulfilRenewals}, nil
}

// Name returns "paddle".
func (p *Paddle) Name() string { return "paddle" }

// Verify checks the Paddle-Signature over the exact body and reads the
// event. A header with more than one ts is refused: a fresh ts in front of
// a captured delivery must not pass the tolerance on a signature made with
// another.
func (p *Paddle) Verify(header http.Header, body []byte, now time.Time) (Event, error) {
	ts, sigs, ok := paddleSignature(header.Get("Paddle-Signature"))
	if !ok {
		return Event{}, fmt.Errorf("%w: missing or unreadable Paddle-Signature header", ErrSignature)
	}
	if !hmacSigned(p.secrets, sigs, []byte(ts), []byte{':'}, body) {
		return Event{}, ErrSignature
	}
	sec, _ := strconv.ParseInt(ts, 10, 64)
	if err := checkTimestamp(time.Unix(sec, 0), now, p.tolerance); err != nil {
		return Event{}, err
	}
	return p.Read(body)
}

// Read reads an event Paddle's API listed (GET /events) as Verify reads a
// delivery it verified: the backfill's way in. The caller vouches for the
// body: it came from Paddle's API over TLS with the merchant's key.
func (p *Paddle) Read(body []byte) (Event, error) {
	env, err := parseObject(body)
	if err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	id, _ := env["event_id"].(string)
	typ, _ := env["event_type"].(string)
	if id == "" || typ == "" || len(id) > maxIDLength {
		return Event{}, fmt.Errorf("%w: event_id and event_type are required", ErrMalformed)
	}
	if hasNUL(id, typ) {
		return Event{}, errNUL
	}
	return p.mapEnvelope(Event{Provider: p.Name(), ID: id, Type: typ, Payload: body}, env), nil
}

// Map applies Paddle's rules to a stored body (Mapper).
func (p *Paddle) Map(eventType string, body []byte) (Event, error) {
	env, err := parseObject(body)
	if err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return p.mapEnvelope(Event{Provider: p.Name(), Type: eventType, Payload: body}, env), nil
}

// PaddleRuleTypes are the events Paddle's rules read: the fulfilling one,
// the adjustments (refunds and chargebacks), and a subscription's creation
// and end. A backfill lists these, so an end Paddle could not deliver is
// fetched like any other event.
var PaddleRuleTypes = []string{PaddleFulfilType, "adjustment.created", "adjustment.updated",
	"subscription.created", "subscription.canceled", "subscription.updated",
	"subscription.past_due", "subscription.paused", "subscription.resumed", "subscription.activated"}

// mapEnvelope applies the rule for "paid" to ev: a completed transaction
// names its payment, anything else says why not; an adjustment says what
// it reverses.
func (p *Paddle) mapEnvelope(ev Event, env map[string]any) Event {
	if ev.Type == "adjustment.created" || ev.Type == "adjustment.updated" {
		data, _ := env["data"].(map[string]any)
		ev.Reversal, ev.Note = paddleReversal(data)
		return ev
	}
	if strings.HasPrefix(ev.Type, "subscription.") {
		data, _ := env["data"].(map[string]any)
		ev = paddleSubscription(ev, data)
		if at, err := time.Parse(time.RFC3339Nano, text(env["occurred_at"])); err == nil && (ev.Resumes != "" || ev.Reversal != nil) {
			ev.StandingAt = at
		}
		return ev
	}
	if ev.Type != PaddleFulfilType {
		return ev
	}
	data, _ := env["data"].(map[string]any)
	txn, _ := data["id"].(string)
	status, _ := data["status"].(string)
	origin, _ := data["origin"].(string)
	if sub := prefixedID(data["subscription_id"], "sub_"); sub != "" && status == "completed" && prefixedID(txn, "txn_") != "" {
		// A subscription's transaction is one of its payments: its start
		// (web, api) or a renewal, named by itself.
		ev.Invoice = &Invoice{ID: txn, Payment: txn, Subscription: sub, First: origin == "web" || origin == "api"}
	}
	switch {
	case txn == "" || len(txn) > maxIDLength || hasNUL(txn):
		// Well signed, so stored and acknowledged; it cannot fulfil.
		ev.Unmapped = "no string transaction id at data.id"
	case status != "completed":
		ev.Note = "transaction status is " + strconv.Quote(status) + ", not completed"
	case origin == "subscription_recurring" && !p.fulfilRenewals:
		ev.Note = "a subscription's renewal: renewals fulfil only when configured"
	case origin == "subscription_payment_method_change" || origin == "subscription_update":
		// Paddle's own transactions for a changed card or a changed
		// subscription (often of zero value): no purchase of their own.
		ev.Note = "a transaction of origin " + strconv.Quote(origin) + " pays for no purchase of its own"
	default:
		ev.PaymentID = txn
		details, _ := data["details"].(map[string]any)
		totals, _ := details["totals"].(map[string]any)
		ev.Paid = minorMoney(totals["grand_total"], data["currency_code"])
		ev.Purchase = paddlePurchase(ev, data, origin)
		if ev.Purchase.Kind == SubscriptionStart {
			ev.Subscription = prefixedID(data["subscription_id"], "sub_")
		}
	}
	return ev
}

// paddleSubscription reads a subscription notification (docs/design.md,
// "Subscriptions"): subscription.created links the subscription to the
// transaction that created it (its transaction_id, which Paddle sends on
// this event alone); subscription.canceled, or an update whose status is
// canceled, ends it. A cancellation scheduled for the period's end
// (scheduled_change) is no end: Paddle sends subscription.canceled when it
// takes effect. A status past_due or paused suspends it (subscription.
// past_due, subscription.paused, or an update); active or trialing says
// it is active (subscription.resumed, subscription.activated, or an
// update).
func paddleSubscription(ev Event, data map[string]any) Event {
	id := prefixedID(data["id"], "sub_")
	if id == "" {
		ev.Note = "names no subscription Guardian can read"
		return ev
	}
	status, _ := data["status"].(string)
	switch {
	case ev.Type == "subscription.created":
		ev.Subscription, ev.SubscriptionPurchase = id, prefixedID(data["transaction_id"], "txn_")
		if ev.SubscriptionPurchase == "" {
			ev.Subscription, ev.Note = "", "subscription created by no transaction Guardian can read"
		}
	case status == "canceled" && (ev.Type == "subscription.canceled" || ev.Type == "subscription.updated"):
		ev.Reversal = &Reversal{Kind: End, Subscription: id}
	default:
		ev.Reversal, ev.Resumes, ev.Note = standing(id, status, "active", "trialing")
		if ev.Resumes != "" && data["scheduled_change"] != nil {
			ev.Note = "subscription change scheduled: a cancellation ends it when it takes effect, not now"
		}
	}
	return ev
}

// paddlePurchase reads what a completed transaction says was bought: its
// items (each price, its product and quantity), its custom_data, its
// customer, and its kind by origin and subscription. Paddle's transaction
// names no customer email.
func paddlePurchase(ev Event, data map[string]any, origin string) *Purchase {
	p := basePurchase(ev)
	p.Metadata = metadata(data["custom_data"])
	if c := text(data["customer_id"]); c != "" {
		p.Customer = &Customer{ID: c}
	}
	subscription := text(data["subscription_id"])
	switch {
	case origin == "subscription_recurring":
		p.Kind = Renewal
	case (origin == "web" || origin == "api") && subscription != "":
		p.Kind = SubscriptionStart
	case (origin == "web" || origin == "api") && data["subscription_id"] == nil:
		p.Kind = OneTime
	}
	items, _ := data["items"].([]any)
	for _, i := range items {
		item, _ := i.(map[string]any)
		price, _ := item["price"].(map[string]any)
		p.Items = addItem(p.Items, Item{Product: text(price["product_id"]), Price: text(price["id"]), Quantity: quantity(item["quantity"])})
	}
	return p
}

// paddleSignature reads "ts=...;h1=...[;h1=...]": exactly one ts, of digits,
// and the h1 values that decode as hex. ok is false for anything else.
func paddleSignature(header string) (ts string, sigs [][]byte, ok bool) {
	if header == "" || len(header) > 4096 {
		return "", nil, false
	}
	for _, part := range strings.Split(header, ";") {
		k, v, found := strings.Cut(strings.TrimSpace(part), "=")
		if !found {
			return "", nil, false
		}
		switch k {
		case "ts":
			if ts != "" || v == "" || strings.Trim(v, "0123456789") != "" || len(v) > 12 {
				return "", nil, false
			}
			ts = v
		case "h1":
			if b, err := hex.DecodeString(v); err == nil && len(b) == sha256.Size {
				sigs = append(sigs, b)
			}
		}
	}
	return ts, sigs, ts != "" && len(sigs) > 0
}

// paddleReversal reads an adjustment: a refund Paddle approved (whole when
// the adjustment, or every item of it, is "full"), a chargeback (lost: the
// funds are taken), a chargeback warning (opened), a chargeback reversed
// (won). A credit, or a refund pending approval or rejected, is none.
func paddleReversal(data map[string]any) (*Reversal, string) {
	str := func(k string) string { v, _ := data[k].(string); return v }
	r := &Reversal{PaymentID: str("transaction_id")}
	switch action := str("action"); action {
	case "refund":
		if st := str("status"); st != "approved" {
			return nil, "refund adjustment is " + strconv.Quote(st) + ", not approved"
		}
		r.Kind, r.Full = Refund, paddleWhole(data)
	case "chargeback":
		r.Kind, r.Stage = Dispute, DisputeLost
	case "chargeback_warning":
		r.Kind, r.Stage = Dispute, DisputeOpened
	case "chargeback_reverse":
		r.Kind, r.Stage = Dispute, DisputeWon
	default:
		return nil, "adjustment " + strconv.Quote(action) + " takes no money back"
	}
	if r.PaymentID == "" || len(r.PaymentID) > maxIDLength || hasNUL(r.PaymentID) {
		return nil, "names no transaction: a reversal Guardian cannot match to a payment"
	}
	return r, ""
}

// paddleWhole reports whether an adjustment is the whole transaction: its
// own type, or else every item's.
func paddleWhole(data map[string]any) bool {
	if t, ok := data["type"].(string); ok {
		return t == "full"
	}
	items, _ := data["items"].([]any)
	for _, it := range items {
		if m, _ := it.(map[string]any); m == nil || m["type"] != "full" {
			return false
		}
	}
	return len(items) > 0
}

// Paddle's settings, and its registration: served when its secrets are
// set. Its backfill's are app/backfill's.
var (
	paddleSecrets = settings.List(settings.Setting{
		Name: "GUARDIAN_PADDLE_SECRETS", Default: "unset (Paddle not served)", Secret: true,
		Doc: "Paddle Billing destination secrets (`pdl_ntfset_...`), comma-separated",
	}, ",")
	paddleFulfilRenewals = settings.Bool(settings.Setting{
		Name: "GUARDIAN_PADDLE_FULFIL_RENEWALS", Default: "`false`", Doc: "whether a Paddle subscription's recurring transactions fulfil too",
	}, false)
)

func init() {
	Register(Driver{Name: "paddle", Secrets: paddleSecrets, Open: func(env *settings.Env, c Common) (Provider, error) {
		secrets, renewals := paddleSecrets.Read(env), paddleFulfilRenewals.Read(env)
		if len(secrets) == 0 {
			return nil, nil
		}
		checkSecrets(env, c, paddleSecrets.Name, secrets, PaddleSecret)
		return NewPaddle(PaddleConfig{Secrets: secrets, Tolerance: c.Tolerance, FulfilRenewals: renewals})
	}})
}
