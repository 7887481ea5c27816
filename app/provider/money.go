package provider

import (
	"strconv"
	"strings"
)

// Money is an amount in its currency's minor units (cents for USD, yen for
// JPY), as a provider's signed fields state it. Amounts are compared only
// in the same currency; Guardian converts nothing.
type Money struct {
	// Minor is the amount in minor units.
	Minor int64
	// Currency is the ISO 4217 code, upper case.
	Currency string
}

// minorMoney reads an amount a provider already states in minor units, a
// JSON number or a string of digits (Stripe's, Adyen's, Paddle's): nil when
// it is missing, negative or the currency is not three letters.
func minorMoney(minor, currency any) *Money {
	cur, _ := currency.(string)
	cur = strings.ToUpper(cur)
	n, err := strconv.ParseInt(idText(minor), 10, 64)
	if err != nil || n < 0 || !isCurrency(cur) {
		return nil
	}
	return &Money{Minor: n, Currency: cur}
}

// decimalMoney reads an amount a provider states as a decimal string in
// major units ("10.99", PayPal's and Shopify's): nil when it is not a
// plain non-negative decimal with at most the currency's minor digits.
func decimalMoney(value, currency any) *Money {
	s, _ := value.(string)
	cur, _ := currency.(string)
	cur = strings.ToUpper(cur)
	if !isCurrency(cur) || s == "" || len(s) > 24 {
		return nil
	}
	whole, frac, _ := strings.Cut(s, ".")
	digits := minorDigits(cur)
	if whole == "" || strings.Trim(whole, "0123456789") != "" || strings.Trim(frac, "0123456789") != "" {
		return nil
	}
	frac = strings.TrimRight(frac, "0")
	if len(frac) > digits {
		return nil
	}
	frac += strings.Repeat("0", digits-len(frac))
	n, err := strconv.ParseInt(whole+frac, 10, 64)
	if err != nil {
		return nil
	}
	return &Money{Minor: n, Currency: cur}
}

// isCurrency reports whether s looks like an ISO 4217 code.
func isCurrency(s string) bool {
	return len(s) == 3 && strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") == ""
}

// minorDigits is how many minor digits ISO 4217 gives a currency: none for
// the yen and its kind, three for the dinars, two for the rest.
func minorDigits(currency string) int {
	switch currency {
	case "BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI", "VND", "VUV", "XAF", "XOF", "XPF":
		return 0
	case "BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND":
		return 3
	}
	return 2
}
