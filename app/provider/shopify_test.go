package provider_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
)

// TestShopifyVerifiesTheSDKVector: the X-Shopify-Hmac-Sha256 Shopify's own
// library accepts, accepted here, with the secret listed second as during a
// rotation; one byte changed, refused; and our signer makes the same value.
func TestShopifyVerifiesTheSDKVector(t *testing.T) {
	t.Parallel()
	var v struct{ Secret, Hmac, Body string }
	loadTestdata(t, "shopify/sdk_vector.json", &v)
	s, err := provider.NewShopify(provider.ShopifyConfig{Secrets: []string{"a-secret-being-rotated-out-0123456789", v.Secret}})
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("X-Shopify-Hmac-Sha256", v.Hmac)
	h.Set("X-Shopify-Topic", "products/update")
	h.Set("X-Shopify-Event-Id", "98880550-7158-44d4-b7cd-2c97c8a091b5")
	h.Set("X-Shopify-Webhook-Id", "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043")
	ev, err := s.Verify(h, []byte(v.Body), time.Now())
	if err != nil {
		t.Fatalf("the SDK's vector: %v", err)
	}
	if ev.ID != "98880550-7158-44d4-b7cd-2c97c8a091b5" || ev.DeliveryID != "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043" || ev.Type != "products/update" || ev.Fulfils() {
		t.Errorf("event = %+v", ev)
	}
	altered := []byte(v.Body)
	altered[2] ^= 1
	if _, err := s.Verify(h, altered, time.Now()); !errors.Is(err, provider.ErrSignature) {
		t.Errorf("a body altered by one byte: %v, want ErrSignature", err)
	}
	if got := providertest.SignShopify([]byte(v.Body), v.Secret, "products/update", "e").Get("X-Shopify-Hmac-Sha256"); got != v.Hmac {
		t.Errorf("providertest.SignShopify = %s, want the SDK's %s", got, v.Hmac)
	}
}

func TestShopifyDeliveries(t *testing.T) {
	t.Parallel()
	const secret = "shopify_client_secret_0123456789abcdef"
	body := []byte(`{"id":450789469,"financial_status":"paid","test":false}`)
	s, err := provider.NewShopify(provider.ShopifyConfig{Secrets: []string{secret}})
	if err != nil {
		t.Fatal(err)
	}
	signed := func(edit func(h http.Header)) http.Header {
		h := providertest.SignShopify(body, secret, provider.ShopifyFulfilTopic, "evt-1")
		if edit != nil {
			edit(h)
		}
		return h
	}
	tests := []struct {
		name   string
		header http.Header
		want   error
		id     string
	}{
		{"Signed", signed(nil), nil, "evt-1"},
		{"NoEventIDDedupesOnTheDelivery", signed(func(h http.Header) { h.Del("X-Shopify-Event-Id") }), nil, "whd_evt-1"},
		{"OtherSecret", providertest.SignShopify(body, "another_secret_0123456789abcdef0123", provider.ShopifyFulfilTopic, "evt-1"), provider.ErrSignature, ""},
		{"Missing", signed(func(h http.Header) { h.Del("X-Shopify-Hmac-Sha256") }), provider.ErrSignature, ""},
		{"NotBase64", signed(func(h http.Header) { h.Set("X-Shopify-Hmac-Sha256", "not base64!") }), provider.ErrSignature, ""},
		{"NoTopic", signed(func(h http.Header) { h.Del("X-Shopify-Topic") }), provider.ErrMalformed, ""},
		{"NoIDs", signed(func(h http.Header) { h.Del("X-Shopify-Event-Id"); h.Del("X-Shopify-Webhook-Id") }), provider.ErrMalformed, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev, err := s.Verify(tt.header, body, time.Now())
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
			if err == nil && (ev.ID != tt.id || ev.PaymentID != "450789469") {
				t.Errorf("event = id %q payment %q, want id %q payment 450789469", ev.ID, ev.PaymentID, tt.id)
			}
		})
	}
}

// TestShopifyRules: orders/paid fulfils the order; orders/create never,
// even when its order is paid; an order not paid waits; an id that is not
// a positive integer is flagged; the other mode's orders are refused.
func TestShopifyRules(t *testing.T) {
	t.Parallel()
	var fixture map[string]any
	loadTestdata(t, "shopify/order.json", &fixture)
	const secret = "shopify_client_secret_0123456789abcdef"
	variant := func(edit func(o map[string]any)) []byte {
		var o map[string]any
		b, _ := json.Marshal(fixture)
		_ = json.Unmarshal(b, &o)
		o["financial_status"] = "paid"
		if edit != nil {
			edit(o)
		}
		out, _ := json.Marshal(o)
		return out
	}
	tests := []struct {
		name    string
		mode    provider.Mode
		topic   string
		body    []byte
		payment string
		note    string
		err     error
	}{
		{"PaidFulfilsTheOrder", provider.ModeLive, "orders/paid", variant(nil), "450789469", "", nil},
		{"CreateNeverFulfils", provider.ModeLive, "orders/create", variant(nil), "", "", nil},
		{"AuthorizedWaits", provider.ModeLive, "orders/paid", variant(func(o map[string]any) { o["financial_status"] = "authorized" }), "", `financial_status is "authorized"`, nil},
		{"StringIDIsFlagged", provider.ModeLive, "orders/paid", variant(func(o map[string]any) { o["id"] = "450789469" }), "", "no positive integer order id", nil},
		{"NotAnOrderIsRefused", provider.ModeLive, "orders/paid", []byte(`{"id":207119551,"email":"bob.norman@hostmail.com","orders_count":1}`), "", "", provider.ErrMalformed},
		{"FractionIDIsFlagged", provider.ModeLive, "orders/paid", variant(func(o map[string]any) { o["id"] = 4.5 }), "", "no positive integer order id", nil},
		{"TestOrderAtLive", provider.ModeLive, "orders/paid", variant(func(o map[string]any) { o["test"] = true }), "", "", provider.ErrMode},
		{"LiveOrderAtTest", provider.ModeTest, "orders/paid", variant(nil), "", "", provider.ErrMode},
		{"TestOrderAtTest", provider.ModeTest, "orders/paid", variant(func(o map[string]any) { o["test"] = true }), "450789469", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := provider.NewShopify(provider.ShopifyConfig{Secrets: []string{secret}, Mode: tt.mode})
			if err != nil {
				t.Fatal(err)
			}
			ev, err := s.Verify(providertest.SignShopify(tt.body, secret, tt.topic, "evt-rules"), tt.body, time.Now())
			if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Fatalf("Verify = %v, want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			if ev.PaymentID != tt.payment || !strings.Contains(ev.Note+ev.Unmapped, tt.note) {
				t.Errorf("event = payment %q note %q unmapped %q, want payment %q note ~%q", ev.PaymentID, ev.Note, ev.Unmapped, tt.payment, tt.note)
			}
			if strings.HasSuffix(tt.name, "IsFlagged") != (ev.Unmapped != "") {
				t.Errorf("unmapped = %q: only a paid order without a readable id is flagged", ev.Unmapped)
			}
			// A replay maps the stored body the same way.
			m, err := s.Map(tt.topic, tt.body)
			if err != nil || m.PaymentID != ev.PaymentID || m.Unmapped != ev.Unmapped {
				t.Errorf("Map = %+v, %v; want the same reading as Verify", m, err)
			}
		})
	}
}

// TestShopifyReversals: refunds, refunded orders and chargebacks, each
// matched to its order by what the signed body is, whatever the unsigned
// topic says.
func TestShopifyReversals(t *testing.T) {
	t.Parallel()
	const secret = "shopify_client_secret_for_guardian_reversals"
	s := newShopify(t, secret)
	tests := []struct {
		name, topic, body string
		want              *provider.Reversal
		err               error
	}{
		{"TheLibrarysRefund", "refunds/create", string(loadTestdata(t, "shopify/refund.json", nil)), &provider.Reversal{PaymentID: "450789469", Kind: provider.Refund, RefundID: "509562969", Amount: &provider.Money{20900, "USD"}}, nil},
		{"OrderRefunded", "orders/updated", `{"id":450789469,"financial_status":"refunded","test":false}`, &provider.Reversal{PaymentID: "450789469", Kind: provider.Refund, Full: true}, nil},
		{"OrderPartlyRefunded", "orders/updated", `{"id":450789469,"financial_status":"partially_refunded","test":false}`, &provider.Reversal{PaymentID: "450789469", Kind: provider.Refund}, nil},
		{"OrderUpdatedOtherwise", "orders/updated", `{"id":450789469,"financial_status":"paid","test":false}`, nil, nil},
		{"ChargebackOpened", "disputes/create", `{"id":598735659,"order_id":450789469,"type":"chargeback","status":"needs_response"}`, &provider.Reversal{PaymentID: "450789469", Kind: provider.Dispute, Stage: provider.DisputeOpened}, nil},
		{"ChargebackLost", "disputes/update", `{"id":598735659,"order_id":450789469,"type":"chargeback","status":"lost"}`, &provider.Reversal{PaymentID: "450789469", Kind: provider.Dispute, Stage: provider.DisputeLost}, nil},
		{"ChargebackWon", "disputes/update", `{"id":598735659,"order_id":450789469,"type":"chargeback","status":"won"}`, &provider.Reversal{PaymentID: "450789469", Kind: provider.Dispute, Stage: provider.DisputeWon}, nil},
		{"Inquiry", "disputes/create", `{"id":598735659,"order_id":450789469,"type":"inquiry","status":"needs_response"}`, nil, nil},
		{"ChargebackAcceptedIsLost", "disputes/update", `{"id":598735659,"order_id":450789469,"type":"chargeback","status":"accepted"}`, &provider.Reversal{PaymentID: "450789469", Kind: provider.Dispute, Stage: provider.DisputeLost}, nil},
		{"ChargebackRefundedIsLost", "disputes/update", `{"id":598735659,"order_id":450789469,"type":"chargeback","status":"charge_refunded"}`, &provider.Reversal{PaymentID: "450789469", Kind: provider.Dispute, Stage: provider.DisputeLost}, nil},
		{"AnOrderSentAsARefund", "refunds/create", `{"id":450789469,"financial_status":"paid","test":false}`, nil, provider.ErrMalformed},
		{"ADisputeSentAsARefund", "refunds/create", `{"id":598735659,"order_id":450789469,"type":"chargeback","status":"won"}`, nil, provider.ErrMalformed},
		{"ARefundSentAsADispute", "disputes/update", string(loadTestdata(t, "shopify/refund.json", nil)), nil, provider.ErrMalformed},
		{"ARefundSentAsAnOrder", "orders/paid", string(loadTestdata(t, "shopify/refund.json", nil)), nil, provider.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev := verifyShopify(t, s, secret, tt.topic, tt.name, tt.body, tt.err)
			if !reflect.DeepEqual(ev.Reversal, tt.want) || ev.Fulfils() {
				t.Errorf("reversal %+v, want %+v", ev.Reversal, tt.want)
			}
		})
	}
}

// TestShopifySubscriptionContracts reads a subscription contract's life
// from bodies built to Shopify's webhook reference for the
// subscription_contracts topics (Shopify publishes no signed sample): every
// contract event naming its origin order links the contract to that order,
// the purchase its start paid for; cancelled, expired and failed end it;
// paused, active and stale decide nothing (no signed time orders them). The body
// decides, never the unsigned topic: a contract under an order's topic
// and an order under a contract's are refused, and a cancelled contract
// sent under subscription_contracts/activate still ends.
func TestShopifySubscriptionContracts(t *testing.T) {
	t.Parallel()
	const secret = "shopify_client_secret_for_guardian_contracts"
	s := newShopify(t, secret)
	contract := func(status string) string {
		return `{"id":9001,"admin_graphql_api_id":"gid://shopify/SubscriptionContract/9001","customer_id":207119551,` +
			`"admin_graphql_api_customer_id":"gid://shopify/Customer/207119551","origin_order_id":450789469,` +
			`"admin_graphql_api_origin_order_id":"gid://shopify/Order/450789469","status":"` + status + `","currency_code":"USD","revision_id":"1"}`
	}
	ended := &provider.Reversal{Kind: provider.End, Subscription: "9001"}
	tests := []struct {
		name, topic, body string
		end               *provider.Reversal
		err               error
	}{
		{"Created", "subscription_contracts/create", contract("active"), nil, nil},
		// Paused and active decide nothing: no signed time or id orders them,
		// so a captured one replayed under a new event id would be a new word.
		{"Paused", "subscription_contracts/pause", contract("paused"), nil, nil},
		{"Stale", "subscription_contracts/update", contract("stale"), nil, nil},
		{"Cancelled", "subscription_contracts/cancel", contract("cancelled"), ended, nil},
		{"Expired", "subscription_contracts/expire", contract("expired"), ended, nil},
		{"Failed", "subscription_contracts/fail", contract("failed"), ended, nil},
		{"TheBodyDecidesNotTheTopic", "subscription_contracts/activate", contract("cancelled"), ended, nil},
		{"AContractSentAsAnOrder", "orders/paid", contract("active"), nil, provider.ErrMalformed},
		{"AnOrderSentAsAContract", "subscription_contracts/cancel", `{"id":450789469,"financial_status":"paid","test":false}`, nil, provider.ErrMalformed},
		{"ADisputeSentAsAContract", "subscription_contracts/cancel", `{"id":598735659,"order_id":450789469,"type":"chargeback","status":"cancelled"}`, nil, provider.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev := verifyShopify(t, s, secret, tt.topic, tt.name, tt.body, tt.err)
			if tt.err != nil {
				return
			}
			if ev.Fulfils() || !reflect.DeepEqual(ev.Reversal, tt.end) {
				t.Errorf("fulfils %v, reversal %+v; want no fulfilment and %+v", ev.Fulfils(), ev.Reversal, tt.end)
			}
			if ev.Resumes != "" {
				t.Errorf("resumes %q: a contract's word of being active decides nothing", ev.Resumes)
			}
			if sub, order := ev.StartsSubscription(); sub != "9001" || order != "450789469" {
				t.Errorf("links %q to %q, want the contract 9001 to its origin order 450789469", sub, order)
			}
		})
	}

	// A contract whose ids disagree names nothing; one made without an
	// order (by an app, not a checkout) links nothing, and still ends.
	for body, links := range map[string]bool{
		`{"id":9002,"admin_graphql_api_id":"gid://shopify/SubscriptionContract/9001","origin_order_id":450789469,"status":"cancelled"}`: false,
		`{"id":9001,"admin_graphql_api_id":"gid://shopify/SubscriptionContract/9001","origin_order_id":null,"status":"cancelled"}`:      false,
	} {
		ev, err := s.Verify(providertest.SignShopify([]byte(body), secret, "subscription_contracts/cancel", "evt-odd"), []byte(body), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if sub, _ := ev.StartsSubscription(); (sub != "") != links {
			t.Errorf("%s: links %q", body, sub)
		}
		if strings.Contains(body, `"id":9002`) != (ev.Reversal == nil) {
			t.Errorf("%s: reversal %+v", body, ev.Reversal)
		}
	}
}

// newShopify is a Shopify provider verifying with secret alone.
func newShopify(t *testing.T, secret string) *provider.Shopify {
	t.Helper()
	s, err := provider.NewShopify(provider.ShopifyConfig{Secrets: []string{secret}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// verifyShopify signs body as Shopify signs a delivery of topic, verifies
// it with s, and fails t unless Verify's error is want (nil: none).
func verifyShopify(t *testing.T, s *provider.Shopify, secret, topic, name, body string, want error) provider.Event {
	t.Helper()
	ev, err := s.Verify(providertest.SignShopify([]byte(body), secret, topic, "evt-"+name), []byte(body), time.Now())
	if !errors.Is(err, want) || (want == nil) != (err == nil) {
		t.Fatalf("Verify = %v, want %v", err, want)
	}
	return ev
}
