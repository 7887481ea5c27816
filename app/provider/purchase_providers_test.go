package provider_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
)

// TestEveryProviderStatesItsPurchase reads each provider's paid sample
// (built from the provider's own published samples) into the one purchase
// shape: what the provider's signed event states is there, and nothing it
// does not state.
func TestEveryProviderStatesItsPurchase(t *testing.T) {
	t.Parallel()
	want := map[string]func(t *testing.T, p *provider.Purchase){
		"stripe": func(t *testing.T, p *provider.Purchase) {
			require.Equal(t, provider.OneTime, p.Kind, "a Checkout Session in payment mode")
			require.Empty(t, p.Items, "Stripe's session event lists no line items")
		},
		"paddle": func(t *testing.T, p *provider.Purchase) {
			require.Equal(t, provider.OneTime, p.Kind, "origin web, no subscription")
			require.Equal(t, []provider.Item{{Product: "pro_01gsz97mq9pa4fkyy0wqenepkz", Price: "pri_01gsz98e27ak2tyhexptwc58yk", Quantity: one()}}, p.Items[:1])
			require.Equal(t, "ctm_01h8e18bxp9hby49dnm8ewf0m0", p.Customer.ID)
		},
		"shopify": func(t *testing.T, p *provider.Purchase) {
			require.Equal(t, provider.OneTime, p.Kind, "no line under a selling plan")
			require.Equal(t, provider.Item{Product: "632910392", Price: "39072856", Quantity: one()}, p.Items[0])
			require.Equal(t, "bob.norman@hostmail.com", p.Customer.Email)
		},
		"lemonsqueezy": func(t *testing.T, p *provider.Purchase) {
			require.Empty(t, p.Kind, "order_created does not say whether it starts a subscription")
			require.Equal(t, provider.Item{Product: "1", Price: "1"}, p.Items[0])
			require.Equal(t, map[string]string{"customer_id": "25"}, p.Metadata, "the checkout's custom data")
			require.NotNil(t, p.Amount)
		},
		"paypal": func(t *testing.T, p *provider.Purchase) {
			require.Empty(t, p.Kind)
			require.Empty(t, p.Items, "a capture lists no items")
			require.NotNil(t, p.Amount)
		},
		"adyen": func(t *testing.T, p *provider.Purchase) {
			require.Contains(t, p.Metadata, "merchant_reference", "the signed merchantReference")
			require.Len(t, p.Metadata, 1, "nothing of the unsigned additionalData")
			require.Equal(t, "live", p.Mode, "Adyen's item says no mode the key does not: the deployment's")
		},
		"standard": func(t *testing.T, p *provider.Purchase) {
			require.Empty(t, p.Kind, "the sample states no data.purchase")
		},
	}
	fixtures := map[string]string{
		"paddle": "paddle/transaction_completed.json", "shopify": "shopify/order.json", "lemonsqueezy": "lemonsqueezy/order_created.json",
		"paypal": "paypal/capture_completed.json", "adyen": "adyen/authorisation.json",
	}
	now := time.Now()
	for _, s := range providertest.Samples() {
		t.Run(s.Name, func(t *testing.T) {
			check, ok := want[s.Name]
			require.True(t, ok, "every provider's purchase is tested here")
			prov := s.Build(t, nil)
			id, body := s.Paid("P1")
			if f, ok := fixtures[s.Name]; ok {
				// The provider's own published sample, where testdata has
				// one: what its paid event states.
				body = loadTestdata(t, f, nil)
			}
			if s.Name == "shopify" {
				// The signer reads the delivery's topic from the body
				// (providertest.ShopifyOrder's convention).
				// Shopify's sample order is authorized; paid, it fulfils.
				body = append([]byte(`{"topic":"orders/paid",`), body[1:]...)
				body = bytes.Replace(body, []byte(`"financial_status": "authorized"`), []byte(`"financial_status": "paid"`), 1)
			}
			h, b := s.Request(t, id, body, now, false)
			var evs []provider.Event
			if batch, ok := prov.(provider.Batch); ok {
				var err error
				evs, err = batch.VerifyBatch(h, b, now)
				require.NoError(t, err)
			} else {
				ev, err := prov.Verify(h, b, now)
				require.NoError(t, err)
				evs = []provider.Event{ev}
			}
			require.Len(t, evs, 1)
			ev := evs[0]
			require.True(t, ev.Fulfils(), ev.Note+ev.Unmapped)
			p := provider.PurchaseOf(ev, provider.ModeLive)
			require.Equal(t, s.Name, p.Provider)
			require.Equal(t, ev.PaymentID, p.ID)
			if ev.Paid != nil {
				require.Equal(t, ev.Paid.Minor, *p.Amount)
				require.Equal(t, ev.Paid.Currency, p.Currency)
			}
			check(t, p)
		})
	}
}

func one() *int64 { n := int64(1); return &n }
