package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Forged is one provider's delivery of a body no secret signed: headers
// shaped as the provider sends them, with a signature of zeros.
type Forged struct {
	Provider string
	Header   http.Header
	Body     []byte
}

// ForgedDeliveries are a forged delivery of bodyBytes for each provider an
// anonymous sender can reach, as an attacker would send them: the
// signature headers well formed, the signature wrong. Adyen's signature
// rides inside the body, the item's fields first and the filler after;
// PayPal's names a certificate URL that is not PayPal's, so nothing is
// fetched (a bench reaches nothing beyond loopback).
func ForgedDeliveries(bodyBytes int) []Forged {
	pad := func(prefix, suffix string) []byte {
		return []byte(prefix + strings.Repeat("x", bodyBytes-len(prefix)-len(suffix)) + suffix)
	}
	plain := pad(`{"id":"evt_flood","type":"checkout.session.completed","note":"`, `"}`)
	now := strconv.FormatInt(time.Now().Unix(), 10)
	zeros := strings.Repeat("0", 64)
	b64 := strings.Repeat("A", 43) + "="
	h := func(kv ...string) http.Header {
		out := http.Header{"Content-Type": {"application/json"}}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	return []Forged{
		{"stripe", h("Stripe-Signature", "t="+now+",v1="+zeros), plain},
		{"standard", h("webhook-id", "msg_flood", "webhook-timestamp", now, "webhook-signature", "v1,"+b64), plain},
		{"paddle", h("Paddle-Signature", "ts="+now+";h1="+zeros), plain},
		{"shopify", h("X-Shopify-Hmac-Sha256", b64, "X-Shopify-Topic", "orders/paid", "X-Shopify-Event-Id", "flood"), plain},
		{"lemonsqueezy", h("X-Signature", zeros, "X-Event-Name", "order_created"), plain},
		{"adyen", h(), pad(`{"live":"false","notificationItems":[{"NotificationRequestItem":{"eventCode":"AUTHORISATION","pspReference":"FLOOD","success":"true",`+
			`"amount":{"value":100,"currency":"EUR"},"additionalData":{"hmacSignature":"`+b64+`","filler":"`, `"}}}]}`)},
		{"paypal", h("Paypal-Transmission-Id", "flood", "Paypal-Transmission-Time", time.Now().UTC().Format(time.RFC3339), "Paypal-Transmission-Sig", "AAAA",
			"Paypal-Auth-Algo", "SHA256withRSA", "Paypal-Cert-Url", "https://evil.example/v1/notifications/certs/CERT-00000000-00000000-00000000"), plain},
	}
}

// Flood sends f to the Guardian at base n times from workers senders, each
// request from an address of its own (X-Forwarded-For, for a Guardian
// that trusts the loopback proxy), so the per-address refusal limit cuts
// none short; seq numbers the addresses across floods. It returns the last
// status answered.
func Flood(ctx context.Context, client *http.Client, base string, f Forged, n, workers int, seq *atomic.Int64) (int, error) {
	var status atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range n / workers {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+"/webhooks/"+f.Provider, bytes.NewReader(f.Body))
				if err == nil {
					req.Header = f.Header.Clone()
					i := seq.Add(1)
					req.Header.Set("X-Forwarded-For", fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255))
					var resp *http.Response
					if resp, err = client.Do(req); err == nil {
						resp.Body.Close()
						status.Store(int64(resp.StatusCode))
					}
				}
				if err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := first.Load().(error); err != nil {
		return 0, err
	}
	return int(status.Load()), nil
}
