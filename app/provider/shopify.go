package provider

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/guardian-pay/guardian/app/settings"
)

// ShopifyConfig configures Shopify's verification and rules.
type ShopifyConfig struct {
	// Secrets are the keys Shopify signs with: the app's client secret, or
	// the signing key a store shows for webhooks made in its admin. A
	// delivery verifies if any of them produced its signature: list the old
	// and the new while rotating. At least one is required.
	Secrets []string
	// Mode is the money the deployment serves: an order whose "test" says
	// otherwise is refused (ErrMode). The zero Mode checks nothing.
	Mode Mode
	// Shops are the shops this deployment serves, by their domains
	// ("example.myshopify.com", and the shop's primary domain where it has
	// one of its own). A public app's client secret signs every shop's
	// deliveries, so with Shops set a delivery from any other shop is
	// refused (ErrNotServed): its X-Shopify-Shop-Domain must be one of
	// them, and, X-Shopify-Shop-Domain being unsigned, an order must name
	// one of them in its own signed order_status_url. Empty serves every
	// shop whose secret is listed (a custom app's secret serves one shop).
	Shops []string
}

// Shopify verifies Shopify's HTTPS webhook deliveries: X-Shopify-Hmac-Sha256
// is the base64 HMAC-SHA256 of the exact body, keyed with the secret. The
// scheme signs no time and no header: docs/security.md says what stops a
// replay.
//
// The rules, by Shopify's documentation (docs/design.md, the rule table):
// events dedupe on X-Shopify-Event-Id (one event delivered to several
// subscriptions carries one event id; its retries carry it too), and
// X-Shopify-Webhook-Id, which Shopify's older pages name for it, is stored
// beside it as the delivery's id; an orders/paid delivery fulfils, its
// payment the order (its numeric id); orders/create never does, paid or not.
type Shopify struct {
	secrets [][]byte
	mode    Mode
	shops   map[string]bool
}

// ShopifyFulfilTopic is the one Shopify topic that fulfils.
const ShopifyFulfilTopic = "orders/paid"

// NewShopify returns a Shopify provider, or an error if no secret is given.
func NewShopify(cfg ShopifyConfig) (*Shopify, error) {
	secrets, err := signingKeys("shopify", cfg.Secrets, nil)
	if err != nil {
		return nil, err
	}
	if err := cfg.Mode.check("shopify"); err != nil {
		return nil, err
	}
	s := &Shopify{mode: cfg.Mode, secrets: secrets}
	for _, shop := range cfg.Shops {
		shop = strings.ToLower(strings.TrimSpace(shop))
		if shop == "" || strings.ContainsAny(shop, "/:@ ") {
			return nil, fmt.Errorf("shopify: shop %q is not a domain (example.myshopify.com)", truncate(shop, 80))
		}
		if s.shops == nil {
			s.shops = map[string]bool{}
		}
		s.shops[shop] = true
	}
	return s, nil
}

// Name returns "shopify".
func (s *Shopify) Name() string { return "shopify" }

// Verify checks X-Shopify-Hmac-Sha256 over the exact body and reads the
// event: its topic and ids from Shopify's headers, its order from the body.
// now is unused: the scheme signs no time.
func (s *Shopify) Verify(header http.Header, body []byte, _ time.Time) (Event, error) {
	sig, err := base64.StdEncoding.DecodeString(header.Get("X-Shopify-Hmac-Sha256"))
	if err != nil || len(sig) != sha256.Size {
		return Event{}, fmt.Errorf("%w: missing or unreadable X-Shopify-Hmac-Sha256 header", ErrSignature)
	}
	if !hmacSigned(s.secrets, [][]byte{sig}, body) {
		return Event{}, ErrSignature
	}

	topic := header.Get("X-Shopify-Topic")
	delivery := header.Get("X-Shopify-Webhook-Id")
	id := header.Get("X-Shopify-Event-Id")
	if id == "" {
		id = delivery // a delivery from before Shopify sent event ids
	}
	if id == "" || topic == "" || len(id) > maxIDLength || len(delivery) > maxIDLength || len(topic) > maxIDLength {
		return Event{}, fmt.Errorf("%w: X-Shopify-Topic and X-Shopify-Event-Id (or X-Shopify-Webhook-Id) are required", ErrMalformed)
	}
	if hasNUL(id, topic, delivery) {
		return Event{}, errNUL
	}
	if s.shops != nil && !s.shops[strings.ToLower(header.Get("X-Shopify-Shop-Domain"))] {
		return Event{}, fmt.Errorf("%w: X-Shopify-Shop-Domain names a shop not in GUARDIAN_SHOPIFY_SHOPS", ErrNotServed)
	}
	order, err := parseObject(body)
	if err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := shopifyTopicFits(topic, order); err != nil {
		return Event{}, err
	}
	if s.shops != nil && shopifyKind(order) == shopifyOrderKind && !s.shops[shopifyOrderShop(order)] {
		return Event{}, fmt.Errorf("%w: the order's order_status_url names no shop in GUARDIAN_SHOPIFY_SHOPS", ErrNotServed)
	}
	if test, ok := order["test"].(bool); ok {
		if err := s.mode.refusal(test, "a test order", "a live order", "a development store's secret in GUARDIAN_SHOPIFY_SECRETS"); err != nil {
			return Event{}, err
		}
	}
	ev := Event{Provider: s.Name(), ID: id, DeliveryID: delivery, Type: topic, Payload: body}
	return shopifyMap(ev, order), nil
}

// Map applies Shopify's rules to a stored body (Mapper).
func (s *Shopify) Map(topic string, body []byte) (Event, error) {
	order, err := parseObject(body)
	if err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return shopifyMap(Event{Provider: s.Name(), Type: topic, Payload: body}, order), nil
}

// shopifyMap applies the rule for "paid" to ev: an orders/paid delivery
// names its order when the order itself says it is paid. The topic rides
// in an unsigned header, so the signed body must say what it is on its own
// (shopifyTopicFits): a signed body of another kind sent under orders/paid
// names no order and is flagged, never fulfilled.
func shopifyMap(ev Event, order map[string]any) Event {
	if shopifyTopics[ev.Type] == shopifyContractKind {
		return shopifyContract(ev, order)
	}
	if ev.Type != ShopifyFulfilTopic {
		ev.Reversal, ev.Note = shopifyReversal(ev.Type, order)
		return ev
	}
	id := positiveID(order["id"])
	status, isOrder := order["financial_status"].(string)
	switch {
	case id == "":
		// Well signed, so stored and acknowledged; it cannot fulfil.
		ev.Unmapped = "no positive integer order id at id"
	case !isOrder:
		ev.Unmapped = "no financial_status: not an order, whatever the unsigned X-Shopify-Topic says"
	case status != "paid":
		ev.Note = "order financial_status is " + strconv.Quote(status) + ", not paid"
	default:
		ev.PaymentID, ev.Paid = id, shopifyPaid(order)
		ev.Purchase = shopifyPurchase(ev, order)
	}
	return ev
}

// shopifyPurchase reads what a paid order says was bought: its
// line_items (product, variant as the price, quantity), its
// note_attributes as metadata, its customer and email, and its mode by
// its own test flag. An order whose lines carry no selling plan is a
// one-time purchase; one with a selling plan names no kind (Shopify's
// order does not say whether it starts or renews the contract).
func shopifyPurchase(ev Event, order map[string]any) *Purchase {
	p := basePurchase(ev)
	if test, ok := order["test"].(bool); ok {
		p.Mode = modeOf(test)
	}
	buyer, _ := order["customer"].(map[string]any)
	p.Customer = customer(text(buyer["id"]), text(order["email"]))
	attrs, _ := order["note_attributes"].([]any)
	meta := map[string]any{}
	for _, a := range attrs {
		if attr, ok := a.(map[string]any); ok {
			if name := text(attr["name"]); name != "" {
				meta[name] = attr["value"]
			}
		}
	}
	p.Metadata = metadata(meta)
	lines, _ := order["line_items"].([]any)
	subscription := false
	for _, l := range lines {
		line, _ := l.(map[string]any)
		if line == nil {
			continue
		}
		if plan, ok := line["selling_plan_allocation"]; ok && plan != nil {
			subscription = true
		}
		p.Items = addItem(p.Items, Item{Product: text(line["product_id"]), Price: text(line["variant_id"]), Quantity: quantity(line["quantity"])})
	}
	if len(lines) > 0 && !subscription {
		p.Kind = OneTime
	}
	return p
}

// shopifyPaid is what an order says the buyer paid: total_price_set's
// presentment money where present (the currency the buyer paid in, which
// the order's refund transactions use), else total_price in the order's
// currency.
func shopifyPaid(order map[string]any) *Money {
	set, _ := order["total_price_set"].(map[string]any)
	if pm, _ := set["presentment_money"].(map[string]any); pm != nil {
		if m := decimalMoney(pm["amount"], pm["currency_code"]); m != nil {
			return m
		}
	}
	return decimalMoney(order["total_price"], order["currency"])
}

// What a Shopify body is, by its own signed fields.
const (
	shopifyOrderKind    = "an order"
	shopifyRefundKind   = "a refund"
	shopifyDisputeKind  = "a dispute"
	shopifyContractKind = "a subscription contract"
	shopifyOtherKind    = "no order, refund, dispute or subscription contract"
)

// shopifyTopics are the topics Guardian acts on, and the kind of body each
// delivers.
var shopifyTopics = map[string]string{
	"orders/paid": shopifyOrderKind, "orders/updated": shopifyOrderKind, "orders/create": shopifyOrderKind,
	"refunds/create":  shopifyRefundKind,
	"disputes/create": shopifyDisputeKind, "disputes/update": shopifyDisputeKind,
	"subscription_contracts/create": shopifyContractKind, "subscription_contracts/update": shopifyContractKind,
	"subscription_contracts/activate": shopifyContractKind, "subscription_contracts/pause": shopifyContractKind,
	"subscription_contracts/cancel": shopifyContractKind, "subscription_contracts/expire": shopifyContractKind,
	"subscription_contracts/fail": shopifyContractKind,
}

// shopifyKind says what a body is by the fields only that kind carries
// (Shopify's Order, Refund, Dispute and SubscriptionContract resources):
// an order its financial_status; a refund its order_id and its
// refund_line_items or transactions; a dispute its order_id, type and
// status; a subscription contract its admin_graphql_api_id, a
// SubscriptionContract's. Each excludes the others' marks, so no body is
// two kinds.
func shopifyKind(body map[string]any) string {
	has := func(k string) bool { _, ok := body[k]; return ok }
	_, refundLines := body["refund_line_items"].([]any)
	_, txns := body["transactions"].([]any)
	gid, _ := body["admin_graphql_api_id"].(string)
	switch {
	case strings.HasPrefix(gid, shopifyContractGID):
		if has("financial_status") || has("order_id") || refundLines || txns {
			return shopifyOtherKind
		}
		return shopifyContractKind
	case has("financial_status") && !has("order_id"):
		return shopifyOrderKind
	case has("order_id") && (refundLines || txns) && !has("financial_status") && !has("type"):
		return shopifyRefundKind
	case has("order_id") && has("type") && has("status") && !has("financial_status") && !refundLines && !txns:
		return shopifyDisputeKind
	}
	return shopifyOtherKind
}

// shopifyTopicFits refuses a body that is not what its unsigned topic says
// it delivers, for every topic Guardian acts on: a dispute's body resent
// under refunds/create, or a refund's under orders/paid, proves nothing of
// what the topic claims (docs/security.md).
func shopifyTopicFits(topic string, body map[string]any) error {
	want, acts := shopifyTopics[topic]
	if !acts {
		return nil // a topic Guardian decides nothing on
	}
	if got := shopifyKind(body); got != want {
		return fmt.Errorf("%w: the signed body is %s, not what X-Shopify-Topic %s delivers", ErrMalformed, got, topic)
	}
	return nil
}

// shopifyOrderShop is the shop an order names in its own signed fields:
// the host of its order_status_url, lower case; "" where it names none.
func shopifyOrderShop(order map[string]any) string {
	raw, _ := order["order_status_url"].(string)
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.User != nil {
		return ""
	}
	return strings.ToLower(u.Hostname())
}

// shopifyReversal reads a refund or dispute by its topic, whose body
// shopifyTopicFits has checked is what the topic delivers: refunds/create
// carries a refund (its order_id, and the amount of its successful refund
// transactions); orders/updated an order whose financial_status says
// refunded (the whole order) or partially_refunded; disputes/create and
// disputes/update a chargeback (its order_id; an inquiry is no chargeback),
// lost when it closed lost, was accepted by the merchant or refunded
// (accepted, charge_refunded), won when won, open otherwise (needs_response,
// under_review). Anything else is no reversal.
func shopifyReversal(topic string, body map[string]any) (*Reversal, string) {
	var r *Reversal
	orderID := body["order_id"]
	switch topic {
	case "refunds/create":
		if shopifyKind(body) != shopifyRefundKind {
			return nil, "not a refund, whatever the unsigned X-Shopify-Topic says"
		}
		r = &Reversal{Kind: Refund, RefundID: idText(body["id"]), Amount: shopifyRefunded(body)}
	case "orders/updated":
		status, _ := body["financial_status"].(string)
		switch status {
		case "refunded":
			r = &Reversal{Kind: Refund, Full: true}
		case "partially_refunded":
			r = &Reversal{Kind: Refund}
		default:
			return nil, ""
		}
		orderID = body["id"]
	case "disputes/create", "disputes/update":
		if kind, _ := body["type"].(string); kind != "chargeback" || shopifyKind(body) != shopifyDisputeKind {
			return nil, "not a chargeback: an inquiry, or no dispute"
		}
		r = &Reversal{Kind: Dispute, Stage: DisputeOpened}
		switch body["status"] {
		case "won":
			r.Stage = DisputeWon
		case "lost", "accepted", "charge_refunded":
			r.Stage = DisputeLost
		}
	default:
		return nil, ""
	}
	if r.PaymentID = positiveID(orderID); r.PaymentID == "" {
		return nil, "names no positive integer order id: a reversal Guardian cannot match to a payment"
	}
	return r, ""
}

// shopifyRefunded sums a refund's successful refund transactions, all in
// one currency; nil when there are none or they are not all readable.
func shopifyRefunded(refund map[string]any) *Money {
	txns, _ := refund["transactions"].([]any)
	var sum *Money
	for _, t := range txns {
		txn, _ := t.(map[string]any)
		if txn["kind"] != "refund" || txn["status"] != "success" {
			continue
		}
		m := decimalMoney(txn["amount"], txn["currency"])
		if m == nil || (sum != nil && sum.Currency != m.Currency) {
			return nil
		}
		if sum == nil {
			sum = &Money{Currency: m.Currency}
		}
		sum.Minor += m.Minor
	}
	return sum
}

// Shopify's settings, and its registration: served when its secrets are
// set.
var (
	shopifySecrets = settings.List(settings.Setting{
		Name: "GUARDIAN_SHOPIFY_SECRETS", Default: "unset (Shopify not served)", Secret: true,
		Doc: "Shopify signing secrets (app client secret or store webhook key), comma-separated",
	}, ",")
	shopifyShops = settings.List(settings.Setting{
		Name: "GUARDIAN_SHOPIFY_SHOPS", Default: "unset (every shop the secrets sign for)",
		Doc: "the only shops served, comma-separated domains (`example.myshopify.com`, and the shop's primary domain); a public app's other shops are refused (`foreign`)",
	}, ",")
)

func init() {
	Register(Driver{Name: "shopify", Secrets: shopifySecrets, Open: func(env *settings.Env, c Common) (Provider, error) {
		secrets, shops := shopifySecrets.Read(env), shopifyShops.Read(env)
		if len(secrets) == 0 {
			return nil, nil
		}
		checkSecrets(env, c, shopifySecrets.Name, secrets, ShopifySecret)
		return NewShopify(ShopifyConfig{Secrets: secrets, Mode: c.Mode, Shops: shops})
	}})
}

// shopifyContractGID is the prefix of a subscription contract's GraphQL id.
const shopifyContractGID = "gid://shopify/SubscriptionContract/"

// shopifyContract reads a subscription contract's event (docs/design.md,
// "Subscriptions"), by its signed body alone: shopifyTopicFits has checked
// the body is a contract, and which of the subscription_contracts topics
// carried it decides nothing. A contract is created when an order with a
// selling plan is paid: its origin_order_id names that order, the
// purchase its start paid for, and every contract event that names it
// links the two (the order's own orders/paid does not name the contract).
// Its status decides its end: cancelled, expired, or failed (billing
// failures past the app's retries) end it. Paused and active are read as
// nothing: Shopify signs no time and no event id, so a captured "paused"
// delivery replayed under a made-up X-Shopify-Event-Id would be a new
// word that takes access back, and a captured "active" one would grant it
// again; an end is final, and its replay takes nothing back twice. The contract is named by its numeric id, which must be the one its
// GraphQL id carries.
func shopifyContract(ev Event, body map[string]any) Event {
	id := positiveID(body["id"])
	gid, _ := body["admin_graphql_api_id"].(string)
	if id == "" || gid != shopifyContractGID+id {
		ev.Note = "names no subscription contract Guardian can read: id and admin_graphql_api_id disagree"
		return ev
	}
	if order := positiveID(body["origin_order_id"]); order != "" {
		ev.Subscription, ev.SubscriptionPurchase = id, order
	}
	status, _ := body["status"].(string)
	switch status = strings.ToLower(status); status {
	case "cancelled", "expired", "failed":
		ev.Reversal = &Reversal{Kind: End, Subscription: id}
	default:
		ev.Note = "subscription contract " + strconv.Quote(truncate(status, 40)) + ": not ended"
	}
	return ev
}

// positiveID writes a positive integer id (a JSON number) in decimal; ""
// for anything else.
func positiveID(v any) string {
	id, ok := v.(json.Number)
	n, err := strconv.ParseUint(string(id), 10, 64)
	if !ok || err != nil || n == 0 {
		return ""
	}
	return strconv.FormatUint(n, 10)
}
