package receiver

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/receiver/contract"
)

// FuzzRead: whatever body and key a request carries, the kit takes it only
// signed, as exactly a Guardian body whose key is the Idempotency-Key
// header's, a test delivery only under a test key; the rest is refused
// with 401 or 400, never a panic. Seeds: Guardian's own requests.
func FuzzRead(f *testing.F) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	for _, req := range []connector.Request{
		{Key: "gk1_abc", Provider: "stripe", PaymentID: "pi_1", EventID: "evt_1", EventType: "checkout.session.completed", Payload: []byte(`{"id":"evt_1"}`)},
		{Key: "gk1_rev", Provider: "paypal", PaymentID: "CAP1", EventID: "WH-1", EventType: "PAYMENT.CAPTURE.REFUNDED", Action: "revoke", Payload: []byte(`{}`)},
		{Key: contract.TestKeyPrefix + "1", PaymentID: contract.TestPaymentID, EventType: contract.TestEventType, Payload: []byte(`{}`)},
	} {
		body, err := connector.EncodeRequest(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(body, req.Key, true)
	}
	f.Add([]byte(`{"idempotency_key":"k","extra":1}`), "k", true)
	r, err := New(Config{Pool: new(pgxpool.Pool), Secrets: []string{secret}, Handler: func(context.Context, pgx.Tx, Delivery) error { return nil }})
	if err != nil {
		f.Fatal(err)
	}
	signer, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, key string, sign bool) {
		h := http.Header{}
		h.Set("Idempotency-Key", key)
		if sign {
			now := time.Now()
			sig, err := signer.Sign("msg_fuzz", now, body)
			if err != nil {
				t.Fatal(err)
			}
			h.Set("webhook-id", "msg_fuzz")
			h.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
			h.Set("webhook-signature", sig)
		}
		d, test, code, _ := r.read(body, h)
		switch {
		case code == 0 && !sign:
			t.Fatal("an unsigned request was taken")
		case code == 0 && (d.IdempotencyKey != key || key == ""):
			t.Fatalf("taken under key %q with the header's %q", d.IdempotencyKey, key)
		case code == 0 && test != strings.HasPrefix(key, contract.TestKeyPrefix):
			t.Fatal("a test delivery under a real key, or the other way round")
		case code != 0 && code != http.StatusUnauthorized && code != http.StatusBadRequest:
			t.Fatalf("refused with %d", code)
		}
	})
}
