// Package providertest makes verified events for tests that start after
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
