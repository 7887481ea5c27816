package providertest

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"hash/crc32"
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
