package providertest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"
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
