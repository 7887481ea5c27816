package provider

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
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
}

// ShopifyFulfilTopic is the one Shopify topic that fulfils.
const ShopifyFulfilTopic = "orders/paid"

// NewShopify returns a Shopify provider, or an error if no secret is given.
func NewShopify(cfg ShopifyConfig) (*Shopify, error) {
	secrets, err := cleanSecrets(cfg.Secrets)
	if err != nil {
		return nil, fmt.Errorf("shopify: %w", err)
	}
	if err := cfg.Mode.check("shopify"); err != nil {
		return nil, err
	}
	s := &Shopify{mode: cfg.Mode}
	for _, secret := range secrets {
		s.secrets = append(s.secrets, []byte(secret))
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
	if !hmacSigned(s.secrets, body, sig) {
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
	order, err := parseObject(body)
	if err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if test, ok := order["test"].(bool); ok && s.mode.refuses(test) {
		if test {
			return Event{}, fmt.Errorf("%w: a test order at a live deployment: is a development store's secret in GUARDIAN_SHOPIFY_SECRETS?", ErrMode)
		}
		return Event{}, fmt.Errorf("%w: a live order at a test deployment (GUARDIAN_MODE=test)", ErrMode)
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
// in an unsigned header, so the signed body must say "paid" on its own: a
// signed body of another kind (a customer, with a numeric id too) sent
// under orders/paid names no order and is flagged, never fulfilled.
func shopifyMap(ev Event, order map[string]any) Event {
	if ev.Type != ShopifyFulfilTopic {
		ev.Reversal, ev.Note = shopifyReversal(ev.Type, order)
		return ev
	}
	id, ok := order["id"].(json.Number)
	n, err := strconv.ParseUint(string(id), 10, 64)
	status, isOrder := order["financial_status"].(string)
	switch {
	case !ok || err != nil || n == 0:
		// Well signed, so stored and acknowledged; it cannot fulfil.
		ev.Unmapped = "no positive integer order id at id"
	case !isOrder:
		ev.Unmapped = "no financial_status: not an order, whatever the unsigned X-Shopify-Topic says"
	case status != "paid":
		ev.Note = "order financial_status is " + strconv.Quote(status) + ", not paid"
	default:
		ev.PaymentID = strconv.FormatUint(n, 10)
	}
	return ev
}

// shopifyReversal reads a refund or dispute by its topic and, the topic
// being unsigned, by what the signed body is: refunds/create carries a
// refund (its order_id; whether it is the whole order it does not say);
// orders/updated an order whose financial_status says refunded (the whole
// order) or partially_refunded; disputes/create and disputes/update a
// chargeback (its order_id; won or lost when it closes; an inquiry is no
// chargeback). Anything else is no reversal.
func shopifyReversal(topic string, body map[string]any) (*Reversal, string) {
	var r *Reversal
	orderID := body["order_id"]
	switch topic {
	case "refunds/create":
		if orderID == nil {
			return nil, "not a refund: no order_id, whatever the unsigned X-Shopify-Topic says"
		}
		r = &Reversal{Kind: Refund}
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
		if kind, _ := body["type"].(string); kind != "chargeback" || orderID == nil {
			return nil, "not a chargeback: an inquiry, or no order_id"
		}
		r = &Reversal{Kind: Dispute, Stage: DisputeOpened}
		switch body["status"] {
		case "won":
			r.Stage = DisputeWon
		case "lost":
			r.Stage = DisputeLost
		}
	default:
		return nil, ""
	}
	id, ok := orderID.(json.Number)
	n, err := strconv.ParseUint(string(id), 10, 64)
	if !ok || err != nil || n == 0 {
		return nil, "names no positive integer order id: a reversal Guardian cannot match to a payment"
	}
	r.PaymentID = strconv.FormatUint(n, 10)
	return r, ""
}
