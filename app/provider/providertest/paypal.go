package providertest

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"hash/crc32"
	"math/big"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/settings"
)

// PayPalCertificate makes a message-verification certificate naming name
// (messageverificationcerts.paypal.com, or the sandbox's), valid from
// notBefore for a day, and its key: what a test's fetch answers in place
// of PayPal's host.
func PayPalCertificate(t testing.TB, name string, notBefore time.Time) (*rsa.PrivateKey, []byte) {
	t.Helper()
	key, pemBytes, err := NewPayPalCertificate(name, notBefore)
	if err != nil {
		t.Fatal(err)
	}
	return key, pemBytes
}

// NewPayPalCertificate is PayPalCertificate for a package's test
// variables.
func NewPayPalCertificate(name string, notBefore time.Time) (*rsa.PrivateKey, []byte, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"PayPal, Inc. (a test's)"}},
		DNSNames:     []string{name},
		NotBefore:    notBefore,
		NotAfter:     notBefore.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// PadCRC32 returns prefix, 64 characters of padding, and suffix, the
// padding chosen so that the whole has the CRC32 (IEEE) want: what anyone
// holding one PayPal delivery can do to give any body of their choice the
// delivery's signed CRC32. The padding is 'a's and 'c's, so it may sit
// inside a JSON string. CRC32 is affine over equal-length messages, so each
// character's flip adds a fixed vector; the 32-bit difference is solved
// over GF(2).
func PadCRC32(prefix, suffix []byte, want uint32) ([]byte, error) {
	const n = 64
	msg := append(append(append([]byte{}, prefix...), bytes.Repeat([]byte("a"), n)...), suffix...)
	base := crc32.ChecksumIEEE(msg)
	type row struct {
		v    uint32
		mask uint64
	}
	var basis [32]*row
	for i := range n {
		msg[len(prefix)+i] ^= 'a' ^ 'c'
		r := &row{v: crc32.ChecksumIEEE(msg) ^ base, mask: 1 << i}
		msg[len(prefix)+i] ^= 'a' ^ 'c'
		for bit := 31; bit >= 0 && r.v != 0; bit-- {
			if r.v&(1<<bit) == 0 {
				continue
			}
			if basis[bit] == nil {
				basis[bit] = r
				break
			}
			r.v, r.mask = r.v^basis[bit].v, r.mask^basis[bit].mask
		}
	}
	need, mask := want^base, uint64(0)
	for bit := 31; bit >= 0; bit-- {
		if need&(1<<bit) == 0 {
			continue
		}
		if basis[bit] == nil {
			return nil, errors.New("the padding's flips do not span every CRC32")
		}
		need, mask = need^basis[bit].v, mask^basis[bit].mask
	}
	for i := range n {
		if mask&(1<<i) != 0 {
			msg[len(prefix)+i] = 'c'
		}
	}
	return msg, nil
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

// The PayPal sample: the webhook's id and an older webhook's still
// served, and the certificate URLs its test fetch answers.
const (
	PayPalWebhook    = "8PT597110X687430LKGECATA"
	PayPalOldWebhook = "3TR748995U920805P"
	// PayPalCertURL is the sample's message-verification certificate
	// (PayPalTestCertificate).
	PayPalCertURL = "https://api.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-00000eb0"
	// PayPalCertDownURL is a certificate whose host does not answer.
	PayPalCertDownURL = "https://api.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-0000d0e0"
)

// PayPalTestCertificate is the sample's message-verification certificate
// and its key, made once per test binary.
var PayPalTestCertificate = sync.OnceValues(func() (*rsa.PrivateKey, []byte) {
	key, pemBytes, err := NewPayPalCertificate("messageverificationcerts.paypal.com", time.Now().Add(-time.Hour))
	if err != nil {
		panic(err)
	}
	return key, pemBytes
})

// PayPalFetch answers a certificate fetch in place of PayPal's host:
// PayPalCertURL is the sample's certificate, PayPalCertDownURL a host that
// does not answer, any other URL no certificate.
func PayPalFetch(_ context.Context, url string) ([]byte, error) {
	switch url {
	case PayPalCertURL:
		_, pemBytes := PayPalTestCertificate()
		return pemBytes, nil
	case PayPalCertDownURL:
		return nil, fmt.Errorf("%w: PayPal's host did not answer", provider.ErrUnavailable)
	}
	return nil, fmt.Errorf("%w: no such certificate", provider.ErrSignature)
}

// OpenPayPal builds a PayPal provider as its settings say, its
// certificates fetched by PayPalFetch, and confirming deliveries with event
// when it is not nil (provider.PayPalConfig.Event).
func OpenPayPal(t testing.TB, vars map[string]string, event func(ctx context.Context, id string) ([]byte, error)) provider.Provider {
	t.Helper()
	env := settings.FromMap(vars)
	p, err := provider.NewPayPal(provider.PayPalConfig{WebhookIDs: settings.Split(vars["GUARDIAN_PAYPAL_WEBHOOK_IDS"], ","),
		Mode: provider.ReadCommon(env, false).Mode, Fetch: PayPalFetch, Event: event, FulfilRenewals: vars["GUARDIAN_PAYPAL_FULFIL_RENEWALS"] == "true"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// PayPalEvent is a PayPal webhook event about capture resource.
func PayPalEvent(id, typ, resource, status string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"event_version":"1.0","create_time":"2026-12-01T00:00:00.000Z","resource_type":"capture","event_type":%q,"summary":"a test's","resource":{"id":%q,"status":%q,"amount":{"currency_code":"USD","value":"19.99"}}}`, id, typ, resource, status)
}

func init() {
	RegisterSample(Sample{
		Name:     "paypal",
		Settings: map[string]string{"GUARDIAN_PAYPAL_WEBHOOK_IDS": PayPalWebhook + "," + PayPalOldWebhook},
		// PayPal's certificates come from PayPal's hosts alone: the
		// sample's provider fetches them with PayPalFetch.
		Open: func(t testing.TB, vars map[string]string) provider.Provider { return OpenPayPal(t, vars, nil) },
		Sign: func(t testing.TB, id string, body []byte, at time.Time, old bool) http.Header {
			webhook := PayPalWebhook
			if old {
				webhook = PayPalOldWebhook
			}
			key, _ := PayPalTestCertificate()
			h, err := SignPayPal(body, key, PayPalCertURL, webhook, "tx-"+id+"-"+at.Format("150405.000"), at)
			if err != nil {
				t.Fatal(err)
			}
			return h
		},
		Paid: func(p string) (string, []byte) {
			return "WH-PAID-" + p, PayPalEvent("WH-PAID-"+p, "PAYMENT.CAPTURE.COMPLETED", "CAP"+p, "COMPLETED")
		},
		// The order's approval comes first and never pays.
		Other: func(p string) (string, []byte) {
			return "WH-APPROVED-" + p, PayPalEvent("WH-APPROVED-"+p, "CHECKOUT.ORDER.APPROVED", "ORDER"+p, "APPROVED")
		},
		Unpaid: func(p string) (string, []byte) {
			return "WH-PENDING-" + p, PayPalEvent("WH-PENDING-"+p, "PAYMENT.CAPTURE.COMPLETED", "CAPU"+p, "PENDING")
		},
		Reversed: func(p string) (string, []byte) {
			id := "WH-DISPUTE-LOST-" + p
			return id, fmt.Appendf(nil, `{"id":%q,"event_type":"CUSTOMER.DISPUTE.RESOLVED","resource_type":"dispute","resource":{"dispute_id":"PP-D-%s","disputed_transactions":[{"seller_transaction_id":"CAP%s"}],"dispute_outcome":{"outcome_code":"RESOLVED_BUYER_FAVOUR"}}}`, id, p, p)
		},
	})
}
