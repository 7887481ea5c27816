package provider_test

import (
	"errors"
	"testing"

	"github.com/guardian-pay/guardian/app/provider"
)

// TestSecretFormats: the one place a secret's format is decided.
func TestSecretFormats(t *testing.T) {
	t.Parallel()
	const strong = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // 24 bytes
	for _, tt := range []struct {
		secret         string
		format, strong bool
	}{
		{strong, true, true},
		{"whsec_c2hvcnQ=", true, false},
		{"whsec_", false, false},
		{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", false, false}, // no prefix
		{"whsec_!!!", false, false},
		{"", false, false},
	} {
		_, err := provider.StandardSecret(tt.secret)
		if got := err == nil; got != tt.format {
			t.Errorf("StandardSecret(%q) ok = %v, want %v", tt.secret, got, tt.format)
		}
		if err != nil && !errors.Is(err, provider.ErrSecretFormat) {
			t.Errorf("StandardSecret(%q): %v is not ErrSecretFormat", tt.secret, err)
		}
		if got := provider.StrongStandardSecret(tt.secret) == nil; got != tt.strong {
			t.Errorf("StrongStandardSecret(%q) ok = %v, want %v", tt.secret, got, tt.strong)
		}
	}
	if provider.StripeSecret("whsec_0123456789abcdefghijklmn") != nil || provider.StripeSecret("whsec_short") == nil || provider.StripeSecret("sk_live_0123456789abcdefghijklmn") == nil {
		t.Error("StripeSecret: whsec_ and at least 24 characters")
	}
}
