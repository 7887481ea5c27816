package contract

// MaxPurchaseBytes bounds a purchase as sent (its JSON), inside the
// envelope (EnvelopeBytes): a provider's body that lists more items or
// metadata than fit gives the first ones.
const MaxPurchaseBytes = 4096

// Purchase is what a paid event says was bought, in one shape whatever the
// provider (docs/design.md, "Actions: what a purchase pays for"): routes
// match on it and every receiver is sent it beside the provider's signed
// event. Each provider fills it from its documented, signed fields; a field
// the provider does not send is left empty, never guessed, and a route that
// asks for it does not match.
type Purchase struct {
	// Provider and ID name the purchase: the provider's name and the
	// payment id its fulfilments are keyed by.
	Provider string `json:"provider"`
	ID       string `json:"id"`
	// Kind is a one-time purchase, a subscription's start or its renewal;
	// empty where the event does not say.
	Kind Kind `json:"kind,omitempty"`
	// Amount is what was paid, in the currency's minor units; nil where
	// the event does not say.
	Amount   *int64 `json:"amount,omitempty"`
	Currency string `json:"currency,omitempty"`
	// Customer is who paid, as the provider names them; nil where the
	// event names nobody.
	Customer *Customer `json:"customer,omitempty"`
	// Items are the products and prices bought; empty where the event
	// lists none (a Stripe Checkout session's event does not).
	Items []Item `json:"items,omitempty"`
	// Metadata is the merchant's own key-value data attached to the
	// purchase, string values only.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Mode is "live" or "test" money: the event's own flag where it has
	// one, else the mode of the key that verified it.
	Mode string `json:"mode,omitempty"`
}

// Kind is the kind of a purchase.
type Kind string

// The kinds of purchase a route can match.
const (
	OneTime           Kind = "one_time"
	SubscriptionStart Kind = "subscription_start"
	Renewal           Kind = "renewal"
)

// Kinds lists every kind, in the order the docs name them.
var Kinds = []Kind{OneTime, SubscriptionStart, Renewal}

// Customer is who paid.
type Customer struct {
	ID    string `json:"id,omitempty"`
	Email string `json:"email,omitempty"`
}

// Item is one line of a purchase: the product, the price it was sold at
// (the provider's price or variant id) and how many.
type Item struct {
	Product  string `json:"product,omitempty"`
	Price    string `json:"price,omitempty"`
	Quantity *int64 `json:"quantity,omitempty"`
}
