package provider

import (
	"os"
	"testing"
)

// BenchmarkParseObject parses the bench's delivery (app/loadgen) and a
// provider's own webhook body of a few kB: what every delivery pays before
// Guardian knows what it is.
func BenchmarkParseObject(b *testing.B) {
	paddle, err := os.ReadFile("testdata/paddle/transaction_completed.json")
	if err != nil {
		b.Fatal(err)
	}
	for _, bb := range []struct {
		name string
		body []byte
	}{
		{"loadgen", []byte(`{"id":"evt_0123456789abcdef01234567","object":"event","type":"checkout.session.completed","data":{"object":{"id":"cs_0123456789abcdef01234567","object":"checkout.session","mode":"payment","payment_status":"paid","payment_intent":"pi_0123456789abcdef01234567","amount_total":4200,"currency":"eur"}}}`)},
		{"paddle-transaction", paddle},
	} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bb.body)))
			for b.Loop() {
				if _, err := parseObject(bb.body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
