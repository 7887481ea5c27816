package provider

import (
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/guardian-pay/guardian/receiver/contract"
)

// What a signing secret looks like. Every check of a secret's format, for
// a provider's endpoint or for the connector (which signs with the Standard
// Webhooks scheme too), is one of these functions.
const (
	// MinSecretBytes is the least random bytes a Standard Webhooks secret
	// holds outside the development profile: the specification allows 24
	// to 64.
	MinSecretBytes = 24
	// MinStripeSecretLen is the least characters after "whsec_" of a
	// Stripe endpoint secret as Stripe shows it.
	MinStripeSecretLen = 24
)

// ErrSecretFormat means a Standard Webhooks secret is not "whsec_"
// followed by base64. Its text names no secret.
var ErrSecretFormat = contract.ErrSecretFormat

// StandardSecret decodes a Standard Webhooks secret ("whsec_" and base64)
// to its key, or returns ErrSecretFormat: the connector secret's format
// (contract.DecodeSecret) is the scheme's.
func StandardSecret(secret string) ([]byte, error) { return contract.DecodeSecret(secret) }

// StrongStandardSecret checks a Standard Webhooks secret's format and that
// it holds at least MinSecretBytes random bytes.
//
// The checks of a secret's format (this one, StripeSecret, PaddleSecret,
// ShopifySecret, LemonSqueezySecret, AdyenHMACKey) word their errors to
// follow the secret's name: "GUARDIAN_CONNECTOR_SECRET is not whsec_
// followed by base64", "secret 2 holds 16 random bytes".
func StrongStandardSecret(secret string) error {
	key, err := StandardSecret(secret)
	if err != nil {
		return fmt.Errorf("is %w", err)
	}
	if len(key) < MinSecretBytes {
		return fmt.Errorf("holds %d random bytes; at least %d random bytes wanted (Standard Webhooks allows 24 to 64)", len(key), MinSecretBytes)
	}
	return nil
}

// StripeSecret checks a Stripe endpoint secret: "whsec_" followed by at
// least MinStripeSecretLen characters, as Stripe shows it.
func StripeSecret(secret string) error {
	raw, ok := strings.CutPrefix(secret, "whsec_")
	if !ok || len(raw) < MinStripeSecretLen {
		return fmt.Errorf("is not whsec_ followed by at least %d characters, as Stripe shows it for the endpoint", MinStripeSecretLen)
	}
	return nil
}

// MinPaddleSecretLen is the least characters of a Paddle destination
// secret: "pdl_ntfset_", the destination's id and a random part.
const MinPaddleSecretLen = 40

// PaddleSecret checks a Paddle Billing notification destination's secret
// as Paddle shows it: "pdl_ntfset_" and at least MinPaddleSecretLen
// characters in all.
func PaddleSecret(secret string) error {
	if !strings.HasPrefix(secret, "pdl_ntfset_") || len(secret) < MinPaddleSecretLen {
		return fmt.Errorf("is not pdl_ntfset_ followed by the destination's id and secret (at least %d characters), as Paddle shows it", MinPaddleSecretLen)
	}
	return nil
}

// MinShopifySecretLen is the least characters of a Shopify signing secret:
// an app's client secret and a store's webhook signing key are 32 or more.
const MinShopifySecretLen = 32

// ShopifySecret checks a Shopify signing secret's length.
func ShopifySecret(secret string) error {
	if len(strings.TrimSpace(secret)) < MinShopifySecretLen {
		return fmt.Errorf("is shorter than %d characters: not an app's client secret or a store's webhook signing key as Shopify shows them", MinShopifySecretLen)
	}
	return nil
}

// MinLemonSqueezySecretLen is the least characters of a Lemon Squeezy
// signing secret outside the development profile. Lemon Squeezy takes any
// secret of 6 to 40 characters; a short one is guessable.
const MinLemonSqueezySecretLen = 24

// LemonSqueezySecret checks a Lemon Squeezy signing secret's length.
func LemonSqueezySecret(secret string) error {
	if n := len(strings.TrimSpace(secret)); n < MinLemonSqueezySecretLen || n > 40 {
		return fmt.Errorf("is not %d to 40 characters: Lemon Squeezy takes up to 40, and fewer than %d are guessable; generate one (openssl rand -hex 20)", MinLemonSqueezySecretLen, MinLemonSqueezySecretLen)
	}
	return nil
}

// AdyenHMACKeyLen is the length of an Adyen HMAC key as the Customer Area
// shows it: 32 bytes in hex.
const AdyenHMACKeyLen = 64

// AdyenHMACKey checks an Adyen HMAC key: AdyenHMACKeyLen hex characters.
func AdyenHMACKey(key string) error {
	key = strings.TrimSpace(key)
	if _, err := hex.DecodeString(key); err != nil || len(key) != AdyenHMACKeyLen {
		return fmt.Errorf("is not %d hex characters, as the Customer Area shows an HMAC key", AdyenHMACKeyLen)
	}
	return nil
}
