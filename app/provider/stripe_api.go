package provider

import (
	"cmp"
	"context"
	"errors"
	"net/url"
	"strings"

	"github.com/guardian-pay/guardian/app/settings"
)

// StripeAPIURL is Stripe's API, live and test alike: the key says which.
const StripeAPIURL = "https://api.stripe.com"

// StripeAPI is Stripe's API as Guardian reads it with a secret or
// restricted key: the events a backfill lists (through stripe-go, which
// takes the key and URL: Key, URL) and the line items of a Checkout
// Session (Items). Safe for concurrent use.
type StripeAPI struct {
	api      *API
	key, url string
}

// NewStripeAPI returns Stripe's API at apiURL (StripeAPIURL when empty; a
// test's fake) with key, which is never logged.
func NewStripeAPI(key, apiURL string) (*StripeAPI, error) {
	if key == "" {
		return nil, errors.New("stripe API: a key is required")
	}
	apiURL = cmp.Or(apiURL, StripeAPIURL)
	api, err := NewAPI("stripe", apiURL)
	if err != nil {
		return nil, err
	}
	return &StripeAPI{api: api, key: key, url: apiURL}, nil
}

// Key is the API key, for the backfill's Stripe client. Never log it.
func (s *StripeAPI) Key() string { return s.key }

// URL is the API's URL.
func (s *StripeAPI) URL() string { return s.url }

// Items lists what a Checkout Session sold, from GET
// /v1/checkout/sessions/{id}/line_items: each line's price, its product
// and quantity, at most as many as a purchase keeps (a session holds at
// most 100 line items, one page). It implements fulfilment.ItemsSource.
func (s *StripeAPI) Items(ctx context.Context, session string) ([]Item, error) {
	if !strings.HasPrefix(session, "cs_") || strings.ContainsAny(session, "/?#%") {
		return nil, errors.New("stripe API: not a Checkout Session id")
	}
	var page struct {
		Data []struct {
			Quantity any `json:"quantity"`
			Price    *struct {
				ID      string `json:"id"`
				Product any    `json:"product"` // an id, or the product when expanded
			} `json:"price"`
		} `json:"data"`
	}
	q := url.Values{"limit": {"100"}}
	if err := s.api.Do(ctx, "GET", "/v1/checkout/sessions/"+session+"/line_items?"+q.Encode(), "Bearer "+s.key, nil, &page); err != nil {
		return nil, err
	}
	items := []Item{}
	for _, line := range page.Data {
		if line.Price != nil {
			items = addItem(items, Item{Price: text(line.Price.ID), Product: text(stripeID(line.Price.Product)), Quantity: quantity(line.Quantity)})
		}
	}
	return items, nil
}

// Stripe's API settings: the backfill and the fetch of Checkout line
// items read them.
var (
	stripeAPIKey = settings.String(settings.Setting{
		Name: "GUARDIAN_STRIPE_API_KEY", Default: "unset (no backfill, no line items)", Secret: true,
		Doc: "a Stripe secret or restricted key that may read events and Checkout Sessions: turns on the leader's periodic backfill of events Stripe never delivered, `guardian backfill stripe [--since 72h]`, " +
			"and, where routes match on products or prices, the fetch of a Checkout Session's line items before its purchase is routed (docs/actions.md)",
	}, "")
	stripeAPIURL = settings.String(settings.Setting{
		Name: "GUARDIAN_STRIPE_API_URL", Default: "`https://api.stripe.com`",
		Doc: "Stripe's API, for the backfill and the line items (a local fake or proxy; https outside the development profile)",
	}, "")
)

// openStripeAPI reads Stripe's API settings: nil when no key is set. The
// key must be of the deployment's mode, so a live deployment never reads
// test money.
func openStripeAPI(env *settings.Env, c Common) (*StripeAPI, error) {
	key := stripeAPIKey.Read(env)
	apiURL := APIURL(env, c, stripeAPIURL, StripeAPIURL, StripeAPIURL)
	test := strings.HasPrefix(key, "sk_test_") || strings.HasPrefix(key, "rk_test_")
	live := strings.HasPrefix(key, "sk_live_") || strings.HasPrefix(key, "rk_live_")
	switch {
	case key == "":
		return nil, nil
	case c.Mode == ModeLive && test:
		return nil, errors.New("GUARDIAN_STRIPE_API_KEY is a test-mode key in a live deployment: Guardian would read test money (set GUARDIAN_MODE=test for a test deployment)")
	case c.Mode == ModeTest && live:
		return nil, errors.New("GUARDIAN_STRIPE_API_KEY is a live-mode key in a test deployment (GUARDIAN_MODE=test)")
	}
	return NewStripeAPI(key, apiURL)
}
