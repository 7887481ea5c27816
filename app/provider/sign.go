package provider

import (
	"bytes"
	"crypto"
	"crypto/hmac"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"hash/crc32"
	"net/http"
	"strconv"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stripe/stripe-go/v82/webhook"
)

// SignStripe returns the headers Stripe would send with body, signed with
// secret at t by stripe-go. Guardian's demo, load generator and tests sign
// with it, so what they send is what Stripe's own library makes.
func SignStripe(body []byte, secret string, t time.Time) http.Header {
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: t})
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Stripe-Signature", signed.Header)
	return h
}

// SignStandard returns the Standard Webhooks headers for a message with id
// and body, signed with secret ("whsec_...") at t by the scheme's reference
// library.
func SignStandard(id string, body []byte, secret string, t time.Time) (http.Header, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, err
	}
	sig, err := wh.Sign(id, t, body)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set(standardwebhooks.HeaderWebhookID, id)
	h.Set(standardwebhooks.HeaderWebhookTimestamp, strconvTime(t))
	h.Set(standardwebhooks.HeaderWebhookSignature, sig)
	return h, nil
}

func strconvTime(t time.Time) string {
	return strconv.FormatInt(t.Unix(), 10)
}

// SignPaddle makes a Paddle-Signature header for body, as Paddle signs, for
// tests and the demo.
func SignPaddle(body []byte, secret string, at time.Time) http.Header {
	ts := strconv.FormatInt(at.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + ":"))
	mac.Write(body)
	h := http.Header{}
	h.Set("Paddle-Signature", "ts="+ts+";h1="+hex.EncodeToString(mac.Sum(nil)))
	return h
}

// SignShopify makes the headers Shopify sends with an orders/paid or other
// topic's body, signed as Shopify signs, for tests and the demo: eventID is
// X-Shopify-Event-Id, and the delivery's X-Shopify-Webhook-Id is derived
// from it.
func SignShopify(body []byte, secret, topic, eventID string) http.Header {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Shopify-Hmac-Sha256", base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	h.Set("X-Shopify-Topic", topic)
	h.Set("X-Shopify-Event-Id", eventID)
	h.Set("X-Shopify-Webhook-Id", "whd_"+eventID)
	return h
}

// SignLemonSqueezy makes the headers Lemon Squeezy sends with body: the
// hex HMAC-SHA256 of it in X-Signature, and the event's name.
func SignLemonSqueezy(body []byte, secret, eventName string) http.Header {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Signature", hex.EncodeToString(mac.Sum(nil)))
	h.Set("X-Event-Name", eventName)
	return h
}

// AdyenItem is one notification item's fields, for SignAdyen.
type AdyenItem struct {
	EventCode, PSPReference, OriginalReference string
	MerchantAccount, MerchantReference         string
	Value                                      int64
	Currency                                   string
	Success                                    bool
	Reason                                     string
}

// SignAdyen makes an Adyen delivery of items, as Adyen sends one, each
// item signed with hexKey; live is the delivery's environment. For tests
// and the demo.
func SignAdyen(items []AdyenItem, hexKey string, live bool) ([]byte, error) {
	list := make([]any, len(items))
	for i, it := range items {
		list[i] = map[string]any{"NotificationRequestItem": map[string]any{
			"additionalData":      map[string]any{},
			"amount":              map[string]any{"currency": it.Currency, "value": it.Value},
			"eventCode":           it.EventCode,
			"eventDate":           "2026-01-01T00:00:00+01:00",
			"merchantAccountCode": it.MerchantAccount,
			"merchantReference":   it.MerchantReference,
			"originalReference":   it.OriginalReference,
			"paymentMethod":       "visa",
			"pspReference":        it.PSPReference,
			"reason":              it.Reason,
			"success":             strconv.FormatBool(it.Success),
		}}
	}
	body, err := json.Marshal(map[string]any{"live": strconv.FormatBool(live), "notificationItems": list})
	if err != nil {
		return nil, err
	}
	return ResignAdyen(body, hexKey)
}

// ResignAdyen signs every notification item of an Adyen delivery with
// hexKey, replacing each additionalData.hmacSignature: a published sample
// becomes one a test's key verifies.
func ResignAdyen(body []byte, hexKey string) ([]byte, error) {
	key, err := hex.DecodeString(hexKey)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var env map[string]any
	if err := dec.Decode(&env); err != nil {
		return nil, err
	}
	var signing []string
	if _, err := scanAdyen(body, func(_ int, f adyenItem, _ []byte) error {
		signing = append(signing, f.signingString())
		return nil
	}); err != nil {
		return nil, err
	}
	list, _ := env["notificationItems"].([]any)
	for i, w := range list {
		item, _ := w.(map[string]any)["NotificationRequestItem"].(map[string]any)
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(signing[i]))
		extra, _ := item["additionalData"].(map[string]any)
		if extra == nil {
			extra = map[string]any{}
			item["additionalData"] = extra
		}
		extra["hmacSignature"] = base64.StdEncoding.EncodeToString(mac.Sum(nil))
	}
	return json.Marshal(env)
}

// SignPayPal returns the headers PayPal sends with body: the transmission
// id and time, the certificate URL, and the RSA-SHA256 signature by key of
// "<id>|<time>|<webhook id>|<crc32 of body>". For tests and the demo.
func SignPayPal(body []byte, key *rsa.PrivateKey, certURL, webhookID, transmissionID string, at time.Time) (http.Header, error) {
	sent := at.UTC().Format(time.RFC3339)
	digest := sha256.Sum256([]byte(transmissionID + "|" + sent + "|" + webhookID + "|" + strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10)))
	sig, err := rsa.SignPKCS1v15(nil, key, crypto.SHA256, digest[:])
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Paypal-Transmission-Id", transmissionID)
	h.Set("Paypal-Transmission-Time", sent)
	h.Set("Paypal-Transmission-Sig", base64.StdEncoding.EncodeToString(sig))
	h.Set("Paypal-Cert-Url", certURL)
	h.Set("Paypal-Auth-Algo", "SHA256withRSA")
	return h, nil
}
