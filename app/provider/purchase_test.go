package provider

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/guardian-pay/guardian/receiver/contract"
)

// TestAPurchaseFitsItsEnvelope: a body listing hundreds of long items and
// keys gives a purchase within contract.MaxPurchaseBytes, keeping the first
// items.
func TestAPurchaseFitsItsEnvelope(t *testing.T) {
	p := &Purchase{Provider: "stripe", ID: "in_1", Metadata: map[string]string{}}
	for i := range 100 {
		p.Items = append(p.Items, Item{Product: fmt.Sprintf("prod_%03d_%s", i, strings.Repeat("x", 400))})
		p.Metadata[fmt.Sprintf("k%02d", i%50)] = strings.Repeat("v", 400)
	}
	got := PurchaseOf(Event{Provider: "stripe", PaymentID: "in_1", Purchase: p}, ModeTest)
	b, _ := json.Marshal(got)
	if len(b) > contract.MaxPurchaseBytes {
		t.Fatalf("%d bytes", len(b))
	}
	if len(got.Items) == 0 || !strings.HasPrefix(got.Items[0].Product, "prod_000") || got.Mode != "test" || len(p.Items) != 100 {
		t.Fatalf("first items kept, the provider's reading untouched: %d items, mode %s", len(got.Items), got.Mode)
	}
}
