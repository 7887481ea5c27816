package provider

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/guardian-pay/guardian/app/settings"
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
	// FulfilTypes are the event types that may fulfil, each under its own
	// rule (StripeRules). Defaults to DefaultStripeFulfilTypes.
	FulfilTypes []string
	// Mode is the money the deployment serves: an event whose livemode says
	// otherwise is refused (ErrMode). The zero Mode checks nothing.
	Mode Mode
	// API, when set, is Stripe's API with a key of the deployment's mode:
	// the backfill and the fetch of Checkout line items use it.
	API *StripeAPI
}

// DefaultStripeFulfilTypes are the Stripe events that fulfil by default:
// Checkout's, as Stripe's "Fulfill orders" guide prescribes. A session
// completed and paid (or free) fulfils; one completed unpaid (bank debits,
// transfers, vouchers) waits for async_payment_succeeded. Both name the
// same purchase, so it fulfils once. payment_intent.succeeded and
// invoice.paid are not in the default: since Stripe's 2025-03-31 API a
// payment intent no longer names its invoice, so a subscription's first
// payment could not be told from the session that bought it.
var DefaultStripeFulfilTypes = []string{"checkout.session.completed", "checkout.session.async_payment_succeeded"}

// Stripe verifies Stripe's Stripe-Signature scheme with stripe-go's webhook
// package and reads Stripe's event envelope.
type Stripe struct {
	secrets     []string
	tolerance   time.Duration
	fulfilTypes []string
	mode        Mode
	api         *StripeAPI
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
	if err := cfg.Mode.check("stripe"); err != nil {
		return nil, err
	}
	return &Stripe{
		secrets:     secrets,
		tolerance:   cmp.Or(cfg.Tolerance, DefaultTolerance),
		fulfilTypes: orDefault(cfg.FulfilTypes, DefaultStripeFulfilTypes),
		mode:        cfg.Mode,
		api:         cfg.API,
	}, nil
}

// API is Stripe's API with the deployment's key; nil without one.
func (s *Stripe) API() *StripeAPI { return s.api }

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

	return s.Read(body)
}

// Read parses a Stripe event envelope and applies the payment rules, with
// no signature to check: for events fetched from Stripe's API with the
// account's key (a backfill), which Stripe vouches for over TLS. It returns
// ErrMalformed for a body that is not a strict-JSON event.
func (s *Stripe) Read(body []byte) (Event, error) {
	env, err := parseObject(body)
	if err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	id, _ := env["id"].(string)
	typ, _ := env["type"].(string)
	if id == "" || len(id) > maxIDLength || typ == "" {
		return Event{}, fmt.Errorf("%w: id and type are required", ErrMalformed)
	}
	if hasNUL(id, typ) {
		return Event{}, errNUL
	}
	if live, ok := env["livemode"].(bool); ok {
		if err := s.mode.refusal(!live, "a test-mode event", "a live-mode event", "a test endpoint's secret in GUARDIAN_STRIPE_SECRETS"); err != nil {
			return Event{}, err
		}
	}
	object, err := dataObject(env)
	if err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	ev := Event{Provider: s.Name(), ID: id, Type: typ, Payload: body, Invoice: stripeInvoice(object)}
	if slices.Contains(StripeReversalTypes, typ) {
		ev.Reversal, ev.Note = stripeReversal(typ, object)
		return ev, nil
	}
	if slices.Contains(StripeSubscriptionTypes, typ) {
		ev.Reversal, ev.Resumes, ev.Note = stripeSubscription(typ, object)
		if created, ok := env["created"].(json.Number); ok {
			if sec, err := created.Int64(); err == nil && (ev.Reversal != nil || ev.Resumes != "") {
				ev.StandingAt = time.Unix(sec, 0)
			}
		}
		return ev, nil
	}
	if !slices.Contains(s.fulfilTypes, typ) {
		return ev, nil
	}
	ev.PaymentID, ev.Note, ev.Unmapped = stripeRule(typ, object)
	switch {
	case len(ev.PaymentID) > maxIDLength:
		ev.PaymentID, ev.Unmapped = "", "payment id longer than any Stripe id"
	case hasNUL(ev.PaymentID):
		ev.PaymentID, ev.Unmapped = "", "payment id holds a NUL character"
	case ev.PaymentID == "" && ev.Note == "" && ev.Unmapped == "":
		ev.Unmapped = "no payment id in data.object"
	}
	if ev.PaymentID != "" {
		ev.Paid = stripePaid(object)
		ev.Purchase = stripePurchase(ev, env, object)
		if object["object"] == "checkout.session" {
			ev.ItemsRef = text(object["id"])
			if object["mode"] == "subscription" {
				ev.Subscription = prefixedID(stripeID(object["subscription"]), "sub_")
			}
		}
	}
	return ev, nil
}

// stripePurchase reads what a paying object says was bought: its
// metadata, customer, kind and, for an invoice, its lines. A Checkout
// Session's event lists no line items (Stripe sends them only through its
// API, GET /v1/checkout/sessions/{id}/line_items): a session's items are
// empty, and the event names the session (Event.ItemsRef) for a fetch.
func stripePurchase(ev Event, env, object map[string]any) *Purchase {
	p := basePurchase(ev)
	p.Metadata = metadata(object["metadata"])
	if live, ok := env["livemode"].(bool); ok {
		p.Mode = modeOf(!live)
	}
	details, _ := object["customer_details"].(map[string]any)
	p.Customer = customer(text(object["customer"]), cmp.Or(text(details["email"]), text(object["customer_email"]), text(object["receipt_email"])))
	switch object["object"] {
	case "checkout.session":
		switch object["mode"] {
		case "payment":
			p.Kind = OneTime
		case "subscription":
			p.Kind = SubscriptionStart
		}
	case "payment_intent":
		// An invoice's payment intent names it; one that names none was
		// paid on its own.
		if _, ok := object["invoice"]; !ok || object["invoice"] == nil {
			p.Kind = OneTime
		}
	case "invoice":
		switch object["billing_reason"] {
		case "subscription_cycle":
			p.Kind = Renewal
		case "manual":
			p.Kind = OneTime
		}
		p.Items = stripeInvoiceLines(object)
	}
	return p
}

// stripeInvoiceLines are an invoice's lines as purchase items: each line's
// price id, its product and quantity.
func stripeInvoiceLines(object map[string]any) []Item {
	lines, _ := object["lines"].(map[string]any)
	data, _ := lines["data"].([]any)
	var items []Item
	for _, l := range data {
		line, _ := l.(map[string]any)
		if line == nil {
			continue
		}
		it := Item{Quantity: quantity(line["quantity"])}
		if price, ok := line["price"].(map[string]any); ok {
			it.Price, it.Product = text(price["id"]), text(price["product"])
		}
		if pricing, ok := line["pricing"].(map[string]any); ok && it.Price == "" {
			// API 2025-03-31 and later: pricing.price_details.
			details, _ := pricing["price_details"].(map[string]any)
			it.Price, it.Product = text(details["price"]), text(details["product"])
		}
		items = addItem(items, it)
	}
	return items
}

// stripePaid is what a paying object says was paid, in minor units: a
// Checkout Session's amount_total, a payment intent's amount_received, an
// invoice's amount_paid.
func stripePaid(object map[string]any) *Money {
	for _, field := range []string{"amount_total", "amount_received", "amount_paid"} {
		if v, ok := object[field]; ok {
			return minorMoney(v, object["currency"])
		}
	}
	return nil
}

// Map applies Stripe's rules to a stored body (Mapper).
func (s *Stripe) Map(_ string, body []byte) (Event, error) { return s.Read(body) }

// dataObject returns an event's data.object: absent is empty, anything but
// an object where one belongs is malformed.
func dataObject(env map[string]any) (map[string]any, error) {
	data, ok := env["data"]
	if !ok || data == nil {
		return nil, nil
	}
	dm, ok := data.(map[string]any)
	if !ok {
		return nil, errors.New("data is not an object")
	}
	object, ok := dm["object"]
	if !ok || object == nil {
		return nil, nil
	}
	om, ok := object.(map[string]any)
	if !ok {
		return nil, errors.New("data.object is not an object")
	}
	return om, nil
}

// RuleTypes lists the event types the payment, reversal, end and invoice
// rules read: a backfill asks Stripe for these, so an end Stripe could not
// deliver is fetched like any other event.
func (s *Stripe) RuleTypes() []string {
	types := slices.Concat(s.fulfilTypes, StripeReversalTypes, StripeSubscriptionTypes, StripeInvoiceTypes)
	slices.Sort(types)
	return slices.Compact(types)
}

// StripeInvoiceTypes are the Stripe events that say which payment paid
// which of a subscription's invoices (docs/design.md, "Subscriptions"): a
// refund or a dispute names a payment intent, and a subscription's
// purchase is named by its Checkout Session (the first invoice) or by the
// renewal's invoice. invoice.paid names the invoice's subscription and
// billing_reason, and, before the 2025-03-31 API, its payment_intent;
// since that API an invoice names no payment, and invoice_payment.paid
// joins the invoice to the payment intent that paid it.
var StripeInvoiceTypes = []string{"invoice.paid", "invoice_payment.paid"}

// stripeInvoice reads what an object says about one of a subscription's
// invoices: an invoice its subscription, whether it is the first (billing
// reason subscription_create) and, before the 2025-03-31 API, its payment
// intent; an invoice payment its invoice and payment intent; a charge,
// before that API, its invoice and payment intent; a subscription-mode
// Checkout Session its first invoice and subscription. Nil when it says
// none of it.
func stripeInvoice(object map[string]any) *Invoice {
	var in Invoice
	switch object["object"] {
	case "invoice":
		in.ID, in.Payment = prefixedID(object["id"], "in_"), prefixedID(stripeID(object["payment_intent"]), "pi_")
		in.Subscription = stripeID(object["subscription"])
		if parent, ok := object["parent"].(map[string]any); ok && in.Subscription == "" {
			details, _ := parent["subscription_details"].(map[string]any)
			in.Subscription = stripeID(details["subscription"])
		}
		in.Subscription, in.First = prefixedID(in.Subscription, "sub_"), object["billing_reason"] == "subscription_create"
	case "invoice_payment":
		payment, _ := object["payment"].(map[string]any)
		in.ID, in.Payment = prefixedID(stripeID(object["invoice"]), "in_"), prefixedID(stripeID(payment["payment_intent"]), "pi_")
	case "charge":
		in.ID, in.Payment = prefixedID(stripeID(object["invoice"]), "in_"), prefixedID(stripeID(object["payment_intent"]), "pi_")
	case "checkout.session":
		if object["mode"] == "subscription" {
			in.ID, in.Subscription, in.First = prefixedID(stripeID(object["invoice"]), "in_"), prefixedID(stripeID(object["subscription"]), "sub_"), true
		}
	}
	if in.ID == "" || in.Subscription == "" && in.Payment == "" {
		return nil
	}
	return &in
}

// StripeSubscriptionTypes are the Stripe events that may end, suspend or
// resume a subscription (docs/design.md, "Subscriptions"):
// customer.subscription.deleted, sent when a subscription ends (cancelled
// now, or at the end of its period once cancel_at_period_end was set),
// customer.subscription.updated, whose status says when it ended
// otherwise (unpaid after the retries the account's settings run), is
// past due or active again, and customer.subscription.paused and
// resumed.
var StripeSubscriptionTypes = []string{"customer.subscription.deleted", "customer.subscription.updated",
	"customer.subscription.paused", "customer.subscription.resumed"}

// stripeSubscription reads a subscription event: an End when its status
// says it ended (canceled, unpaid, incomplete_expired), a Suspension when
// past_due or paused, the subscription it resumes when active or
// trialing, or none of them and why. A cancellation at the period's end
// (cancel_at_period_end with the status still active) is no end: access
// lasts the paid period, and the deletion Stripe sends when it is over
// ends it.
func stripeSubscription(eventType string, object map[string]any) (end *Reversal, resumes, note string) {
	id := prefixedID(stripeID(object["id"]), "sub_")
	if object["object"] != "subscription" || id == "" {
		return nil, "", "names no subscription Guardian can read"
	}
	status, _ := object["status"].(string)
	switch {
	case status == "canceled" || status == "unpaid" || status == "incomplete_expired" || eventType == "customer.subscription.deleted":
		// Stripe deletes a subscription when it ends; a status that does
		// not say so is read as what the event type says.
		return &Reversal{Kind: End, Subscription: id}, "", ""
	}
	end, resumes, note = standing(id, status, "active", "trialing")
	if cancel, _ := object["cancel_at_period_end"].(bool); cancel && resumes != "" {
		note = "subscription cancelled at the end of its period: it ends then, not now"
	}
	return end, resumes, note
}

// stripeID reads an id field that Stripe sends as a string or, expanded,
// as the object.
func stripeID(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case map[string]any:
		id, _ := t["id"].(string)
		return id
	}
	return ""
}

// stripeRule applies Stripe's rule for whether an event of a fulfilling
// type pays for its purchase, and names the purchase (docs/design.md, "What
// a Stripe payment is"). It returns "" and why not when the event does not
// fulfil (note), or "" and what could not be read when the event says it
// is paid but names no purchase Guardian can read (unmapped): the event is
// stored and acknowledged either way.
func stripeRule(eventType string, object map[string]any) (paymentID, note, unmapped string) {
	str := func(m map[string]any, k string) string { v, _ := m[k].(string); return v }
	switch eventType {
	case "checkout.session.completed", "checkout.session.async_payment_succeeded":
		switch str(object, "payment_status") {
		case "paid", "no_payment_required":
		case "unpaid":
			return "", "checkout session not paid yet: waits for checkout.session.async_payment_succeeded", ""
		default:
			return "", "", "checkout session with a payment_status Guardian does not know: " + strconv.Quote(str(object, "payment_status"))
		}
		return checkoutPurchase(object), "", ""
	case "checkout.session.async_payment_failed":
		return "", "checkout session payment failed: never fulfils", ""
	case "payment_intent.succeeded":
		if str(object, "status") != "succeeded" {
			return "", "payment intent not succeeded", ""
		}
		return str(object, "id"), "", ""
	case "invoice.paid":
		if str(object, "billing_reason") == "subscription_create" {
			return "", "a subscription's first invoice is the Checkout purchase that created it", ""
		}
		return str(object, "id"), "", ""
	}
	// A type configured without a rule of its own: its payment intent, else
	// the object.
	if id := checkoutPurchase(object); id != "" {
		return id, "", ""
	}
	return "", "", "no payment id in data.object"
}

// StripeReversalTypes are the Stripe events that refund or dispute a
// payment. Since the 2024-10-28 API refund.created and refund.updated fire
// for every refund, and charge.refunded fires too: one refund arrives as
// several events, and a payment is taken back once whatever number of them
// arrive.
var StripeReversalTypes = []string{
	"charge.refunded", "refund.created", "refund.updated",
	"charge.dispute.created", "charge.dispute.funds_withdrawn", "charge.dispute.closed",
}

// stripeReversal reads a refund or dispute: the payment intent it reverses,
// and how. A refund that has not succeeded (pending, failed, canceled) is
// no reversal yet: nil and why, for the log.
func stripeReversal(eventType string, object map[string]any) (*Reversal, string) {
	str := func(k string) string { v, _ := object[k].(string); return v }
	r := &Reversal{PaymentID: paymentIntentOf(object)}
	switch eventType {
	case "charge.refunded":
		r.Kind = Refund
		r.Full, _ = object["refunded"].(bool) // true once the whole charge is refunded
		r.Amount, r.Cumulative = minorMoney(object["amount_refunded"], object["currency"]), true
	case "refund.created", "refund.updated":
		if st := str("status"); st != "succeeded" {
			return nil, "refund status is " + strconv.Quote(st) + ", not succeeded"
		}
		// The refund alone does not say whether it is the whole charge: its
		// amount is measured against the payment's.
		r.Kind, r.RefundID, r.Amount = Refund, str("id"), minorMoney(object["amount"], object["currency"])
	case "charge.dispute.closed":
		r.Kind = Dispute
		switch str("status") {
		case "lost":
			r.Stage = DisputeLost
		case "won":
			r.Stage = DisputeWon
		default: // warning_closed: an inquiry closed without a dispute
			return nil, "dispute closed as " + strconv.Quote(str("status")) + ": neither won nor lost"
		}
	default: // charge.dispute.created, charge.dispute.funds_withdrawn
		r.Kind, r.Stage = Dispute, DisputeOpened
	}
	if r.PaymentID == "" || len(r.PaymentID) > maxIDLength || hasNUL(r.PaymentID) {
		return nil, "names no payment intent: a reversal Guardian cannot match to a payment"
	}
	return r, ""
}

// paymentIntentOf names the payment intent an object (a charge, a
// refund, a dispute) belongs to, or "".
func paymentIntentOf(object map[string]any) string { return stripeID(object["payment_intent"]) }

// checkoutPurchase names the purchase a Checkout Session (or another object)
// pays for: its payment intent when it has one (payment mode: the same name
// payment_intent.succeeded gives, where that is configured), else its own id
// (subscription mode and free sessions, which have no payment intent).
func checkoutPurchase(object map[string]any) string {
	if pi := paymentIntentOf(object); pi != "" {
		return pi
	}
	id, _ := object["id"].(string)
	return id
}

// stripeTimestamp reads the one t= of a Stripe-Signature header. A header
// with more than one is refused: stripe-go verifies with the last, so a
// fresh t= put in front of a captured delivery would pass the tolerance
// check while the signature still covers the old one.
func stripeTimestamp(header string) (time.Time, bool) {
	var at time.Time
	seen := 0
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if ok && k == "t" {
			sec, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return time.Time{}, false
			}
			at, seen = time.Unix(sec, 0), seen+1
		}
	}
	return at, seen == 1
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

// Stripe's settings, and its registration: always served.
var (
	stripeSecrets = settings.List(settings.Setting{
		Name: "GUARDIAN_STRIPE_SECRETS", Default: "required", Secret: true,
		Doc: "Stripe endpoint secrets (`whsec_` and ≥ 24 characters), comma-separated (old and new while rotating)",
	}, ",")
	stripeFulfilTypes = settings.List(settings.Setting{
		Name: "GUARDIAN_STRIPE_FULFIL_TYPES", Default: "`checkout.session.completed,checkout.session.async_payment_succeeded`",
		Doc: "Stripe types that may fulfil, each under its rule (docs/design.md); add `payment_intent.succeeded` and `invoice.paid` only as that table says",
	}, ",")
)

func init() {
	Register(Driver{Name: "stripe", Secrets: stripeSecrets, DevSecret: DevStripeSecret, Open: func(env *settings.Env, c Common) (Provider, error) {
		secrets := stripeSecrets.Read(env)
		switch {
		case len(secrets) == 0 && c.Dev:
			secrets = []string{DevStripeSecret}
		case len(secrets) == 0:
			return nil, errors.New("GUARDIAN_STRIPE_SECRETS is empty: set the endpoint signing secret(s), comma-separated")
		}
		checkSecrets(env, c, stripeSecrets.Name, secrets, StripeSecret)
		api, err := openStripeAPI(env, c)
		if err != nil {
			return nil, err
		}
		return NewStripe(StripeConfig{Secrets: secrets, Tolerance: c.Tolerance, FulfilTypes: stripeFulfilTypes.Read(env), Mode: c.Mode, API: api})
	}})
}
