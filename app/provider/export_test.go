package provider

// Internals the package's external tests read.
var (
	ParseObject   = parseObject
	ParseStrict   = parseStrict
	ShopifyTopics = shopifyTopics
	ShopifyKind   = shopifyKind
)

// ShopifyOrderKind is what shopifyKind calls an order.
const ShopifyOrderKind = shopifyOrderKind

// PayPalCertURL checks a certificate URL as Verify does before fetching.
func PayPalCertURL(raw string) error {
	_, _, err := payPalCertURL(raw)
	return err
}
