// Package providertest is what tests and tools need of the providers: each
// provider's signer, made as the provider (or its own SDK) signs; each
// provider's Sample, registered in its file beside the signer; the
// conformance suite every provider passes (Run), which the web edge's
// tests drive over HTTP; and verified events for tests that start after
// verification (the domain's, the workers').
package providertest

import "github.com/guardian-pay/guardian/app/provider"

// Payment is a verified Stripe event that fulfils paymentID: the one event
// the domain's and the workers' tests pay with.
func Payment(eventID, paymentID string) provider.Event {
	return provider.Event{
		Provider: "stripe", ID: eventID, Type: "payment_intent.succeeded", PaymentID: paymentID,
		Payload: []byte(`{"id":"` + eventID + `"}`),
	}
}
