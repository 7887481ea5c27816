package providertest

import (
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/registry"
	"github.com/guardian-pay/guardian/app/settings"
)

// Sample is one provider as the conformance suite (Run) drives it: the
// settings that serve it under test, how it signs, and its bodies for one
// purchase. Each provider's file here registers its own
// (RegisterSample), beside its signer; the suite's caller fails for a
// registered provider with none.
type Sample struct {
	// Name is the provider's registered name.
	Name string
	// Settings serve the provider with its test secrets: the current one
	// and one being rotated out.
	Settings map[string]string
	// Open builds the provider from settings (Settings and a test's
	// additions). Nil builds it with its registered driver.
	Open func(t testing.TB, settings map[string]string) provider.Provider
	// Sign signs body at a time, with the current secret, or the one being
	// rotated out when old; nil headers when the scheme cannot be signed
	// with an old secret here. Unused when Seal is set.
	Sign func(t testing.TB, id string, body []byte, at time.Time, old bool) http.Header
	// Paid is the event that pays for purchase; Other another event of the
	// same purchase that must not fulfil it again; Unpaid an event of a
	// fulfilling type that does not pay; Reversed an event that takes the
	// purchase back under the default policy (a whole refund or a lost
	// dispute).
	Paid, Other, Unpaid, Reversed func(purchase string) (id string, body []byte)
	// UnsignedTime says the scheme signs no time: no delivery is stale,
	// and a replay is stopped by the event's identity instead.
	UnsignedTime bool
	// Delivery is the delivery id stored beside the event's, where the
	// provider sends one; nil where it sends none.
	Delivery func(id string) string
	// Seal signs the body itself, where the signature travels inside it
	// (Adyen's): Sign is unused then.
	Seal func(t testing.TB, body []byte, old bool) []byte
	// Alter changes one byte of what the signature covers, where not all
	// of the body is; nil alters a byte in the middle.
	Alter func(body []byte) []byte
}

var samples registry.Of[Sample]

// RegisterSample makes a provider's sample known; it panics for a name
// registered twice.
func RegisterSample(s Sample) { samples.Register(s.Name, s) }

// Samples returns every registered sample, by name.
func Samples() []Sample { return samples.All() }

// SampleOf returns the named provider's sample.
func SampleOf(name string) (Sample, bool) { return samples.Lookup(name) }

// Build returns the sample's provider, served by its Settings with more
// over them.
func (s Sample) Build(t testing.TB, more map[string]string) provider.Provider {
	t.Helper()
	all := maps.Clone(s.Settings)
	maps.Copy(all, more)
	if s.Open != nil {
		return s.Open(t, all)
	}
	d, ok := provider.Lookup(s.Name)
	if !ok {
		t.Fatalf("providertest: %s has a sample but is not a registered provider", s.Name)
	}
	env := settings.FromMap(all)
	p, err := d.Open(env, provider.ReadCommon(env, false))
	if err == nil {
		err = env.Err()
	}
	if err != nil || p == nil {
		t.Fatalf("providertest: the sample's settings do not serve %s: %v", s.Name, err)
	}
	return p
}

// Request returns what the provider sends for body: its headers, and the
// body as sent.
func (s Sample) Request(t testing.TB, id string, body []byte, at time.Time, old bool) (http.Header, []byte) {
	t.Helper()
	if s.Seal != nil {
		return http.Header{"Content-Type": {"application/json"}}, s.Seal(t, body, old)
	}
	return s.Sign(t, id, body, at, old), body
}

// rotates says whether the suite can sign with a secret being rotated out.
func (s Sample) rotates(t testing.TB) bool {
	return s.Seal != nil || s.Sign(t, "rot", []byte(`{}`), time.Now(), true) != nil
}
