package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
)

// seed adds every file of testdata/dir to f as a body.
func seed(f *testing.F, dir string, add func(body []byte)) {
	entries, err := os.ReadDir("testdata/" + dir)
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") {
			b, err := os.ReadFile("testdata/" + dir + "/" + e.Name())
			if err != nil {
				f.Fatal(err)
			}
			add(b)
		}
	}
}

// FuzzAdyenVerify: whatever the body, verification ends in a classified
// error or in events whose ids and payments come from colon-free signed
// fields, each payload its own item as a JSON object; a body re-signed
// with the key verifies unless its fields are refused.
func FuzzAdyenVerify(f *testing.F) {
	seed(f, "adyen", func(b []byte) {
		if signed, err := providertest.ResignAdyen(b, adyenKey); err == nil {
			f.Add(signed)
		}
		f.Add(b)
	})
	a, err := provider.NewAdyen(provider.AdyenConfig{HMACKeys: []string{adyenKey}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		check := func(evs []provider.Event, err error) {
			if err != nil {
				if !errors.Is(err, provider.ErrSignature) && !errors.Is(err, provider.ErrMalformed) {
					t.Fatalf("unclassified error %v", err)
				}
				return
			}
			for _, ev := range evs {
				if strings.Count(ev.ID, ":") != 2 || strings.Contains(ev.PaymentID, ":") {
					t.Fatalf("an id or payment the join cannot tell apart: %q %q", ev.ID, ev.PaymentID)
				}
				var item map[string]any
				if json.Unmarshal(ev.Payload, &item) != nil {
					t.Fatalf("payload is not its item: %q", ev.Payload)
				}
			}
		}
		check(a.VerifyBatch(nil, body, time.Now()))
		if signed, err := providertest.ResignAdyen(body, adyenKey); err == nil {
			evs, err := a.VerifyBatch(nil, signed, time.Now())
			if errors.Is(err, provider.ErrSignature) {
				t.Fatalf("a body signed with the key is refused as unsigned: %v", err)
			}
			check(evs, err)
		}
	})
}

// FuzzShopifyVerify: a signed body under any topic either is refused as
// malformed or reads as what the body itself is: a refund only from a
// refund's fields, an order paid only from an order's.
func FuzzShopifyVerify(f *testing.F) {
	const secret = "shopify_client_secret_for_the_fuzzer_0001"
	seed(f, "shopify", func(b []byte) {
		for _, topic := range []string{"orders/paid", "refunds/create", "disputes/update", "orders/updated"} {
			f.Add(topic, b)
		}
	})
	f.Add("refunds/create", []byte(`{"id":1,"order_id":2,"type":"chargeback","status":"won"}`))
	s, err := provider.NewShopify(provider.ShopifyConfig{Secrets: []string{secret}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, topic string, body []byte) {
		ev, err := s.Verify(providertest.SignShopify(body, secret, topic, "evt-fuzz"), body, time.Now())
		if err != nil {
			if !errors.Is(err, provider.ErrMalformed) && !errors.Is(err, provider.ErrMode) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		doc, perr := provider.ParseObject(body)
		if perr != nil {
			t.Fatalf("accepted a body that is not strict JSON: %v", perr)
		}
		if want, acts := provider.ShopifyTopics[ev.Type]; acts && provider.ShopifyKind(doc) != want {
			t.Fatalf("%s accepted with a body that is %s", ev.Type, provider.ShopifyKind(doc))
		}
		if ev.Fulfils() && provider.ShopifyKind(doc) != provider.ShopifyOrderKind {
			t.Fatal("fulfilled on a body that is no order")
		}
	})
}

// FuzzPayPalHeaders: no header set makes a fetch of a URL outside PayPal's
// hosts and certificate names, and every refusal is classified.
func FuzzPayPalHeaders(f *testing.F) {
	f.Add("https://api.sandbox.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-1d93a270", "afa30d40-ca4a-11e9-ab68-7d4e2605c70c", "2019-08-29T10:49:33Z", "SHA256withRSA", "AAAA")
	f.Add("https://api.paypal.com/v1/notifications/certs/../../oauth2/token", "t", "2019-08-29T10:49:33Z", "SHA256withRSA", "AAAA")
	var mu sync.Mutex
	var fetched []string
	p, err := provider.NewPayPal(provider.PayPalConfig{WebhookIDs: []string{"WH"}, Fetch: func(_ context.Context, url string) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		fetched = append(fetched, url)
		return nil, provider.ErrUnavailable
	}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, certURL, id, sent, algo, sig string) {
		h := http.Header{}
		h.Set("Paypal-Cert-Url", certURL)
		h.Set("Paypal-Transmission-Id", id)
		h.Set("Paypal-Transmission-Time", sent)
		h.Set("Paypal-Auth-Algo", algo)
		h.Set("Paypal-Transmission-Sig", sig)
		at, _ := time.Parse(time.RFC3339, sent)
		_, err := p.Verify(h, []byte(`{}`), at)
		if err == nil {
			t.Fatal("verified without a certificate")
		}
		if !errors.Is(err, provider.ErrSignature) && !errors.Is(err, provider.ErrTimestamp) && !errors.Is(err, provider.ErrUnavailable) {
			t.Fatalf("unclassified error %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, u := range fetched {
			if err := provider.PayPalCertURL(u); err != nil {
				t.Fatalf("fetched %q", u)
			}
		}
	})
}

// TestStandardVerifiesTheSpecVector: the signed vector of the Standard
// Webhooks reference library (libraries/go/webhook_test.go,
// TestWebhookSign) verifies, among other versions' and a rotated secret's
// signatures; one byte changed does not.
func TestStandardVerifiesTheSpecVector(t *testing.T) {
	t.Parallel()
	s, err := provider.NewStandard(provider.StandardConfig{Secrets: []string{standardSecret, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, Tolerance: 100 * 365 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v2,AAAA v1,bm90IHRoaXMgb25lIG5vdCB0aGlzIG9uZSBub3QgdGhpcyA= v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	body := []byte(`{"test": 2432232314}`)
	if _, err := s.Verify(h, body, time.Unix(1614265330, 0)); errors.Is(err, provider.ErrSignature) || errors.Is(err, provider.ErrTimestamp) {
		t.Fatalf("the reference vector: %v", err)
	}
	body[2] ^= 1
	if _, err := s.Verify(h, body, time.Unix(1614265330, 0)); !errors.Is(err, provider.ErrSignature) {
		t.Errorf("one byte changed: %v, want ErrSignature", err)
	}
}

// FuzzPaddleVerify: any Paddle-Signature header and body end in a
// classified error or an event with an id and type; a body signed with the
// secret never fails its signature, and fulfils only a completed
// transaction.
func FuzzPaddleVerify(f *testing.F) {
	const secret = "pdl_ntfset_01hsdn8d43dt7mezr1ef2jtbaw_fuzzsecret"
	now := time.Unix(1767225600, 0)
	seed(f, "paddle", func(b []byte) { f.Add(providertest.SignPaddle(b, secret, now).Get("Paddle-Signature"), b, true) })
	f.Add("ts=1;ts=2;h1=00", []byte(`{}`), false)
	p, err := provider.NewPaddle(provider.PaddleConfig{Secrets: []string{secret}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, header string, body []byte, sign bool) {
		if sign {
			header = providertest.SignPaddle(body, secret, now).Get("Paddle-Signature")
		}
		ev, err := p.Verify(http.Header{"Paddle-Signature": {header}}, body, now)
		if err != nil {
			if !errors.Is(err, provider.ErrSignature) && !errors.Is(err, provider.ErrTimestamp) && !errors.Is(err, provider.ErrMalformed) {
				t.Fatalf("unclassified error %v", err)
			}
			if sign && errors.Is(err, provider.ErrSignature) {
				t.Fatalf("a signed body refused as unsigned: %v", err)
			}
			return
		}
		if ev.ID == "" || ev.Type == "" || (ev.Fulfils() && ev.Type != provider.PaddleFulfilType) {
			t.Fatalf("accepted %+v", ev)
		}
	})
}

// FuzzLemonSqueezyVerify: a signed body under any event name ends in a
// classified error or an event named by its own body, fulfilling only a
// paid order.
func FuzzLemonSqueezyVerify(f *testing.F) {
	const secret = "lemonsqueezy_fuzz_secret_0123456789"
	seed(f, "lemonsqueezy", func(b []byte) { f.Add("order_created", b) })
	l, err := provider.NewLemonSqueezy(provider.LemonSqueezyConfig{Secrets: []string{secret}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, name string, body []byte) {
		ev, err := l.Verify(providertest.SignLemonSqueezy(body, secret, name), body, time.Now())
		if err != nil {
			if !errors.Is(err, provider.ErrMalformed) && !errors.Is(err, provider.ErrMode) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		doc, err := provider.ParseObject(body)
		if err != nil {
			t.Fatalf("accepted a body that is not strict JSON: %v", err)
		}
		meta, _ := doc["meta"].(map[string]any)
		if ev.Type != meta["event_name"] {
			t.Fatalf("event named %q by the unsigned header, not %v by the body", ev.Type, meta["event_name"])
		}
		if ev.Fulfils() && ev.Type != provider.LemonSqueezyFulfilEvent {
			t.Fatalf("fulfilled a %s", ev.Type)
		}
	})
}
