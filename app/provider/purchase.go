package provider

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/guardian-pay/guardian/receiver/contract"
)

// The purchase shape is the receivers' wire contract (contract.Purchase):
// providers fill it, routes match on it, receivers are sent it.
type (
	Purchase = contract.Purchase
	Kind     = contract.Kind
	Customer = contract.Customer
	Item     = contract.Item
)

// The kinds of purchase a route can match.
const (
	OneTime           = contract.OneTime
	SubscriptionStart = contract.SubscriptionStart
	Renewal           = contract.Renewal
)

// Kinds lists every kind, in the order the docs name them.
var Kinds = contract.Kinds

// Bounds on what a purchase keeps from a provider's body: a signed body is
// the merchant's data, but a purchase is stored with every payment and
// sent with every action, so a body that lists thousands of items or keys
// gives the first ones and says no more.
const (
	maxPurchaseItems    = 100
	maxPurchaseMetadata = 50
	maxPurchaseText     = 500
)

// text is v as a purchase field: a string (or a number's digits) of at
// most maxPurchaseText bytes of valid UTF-8 without NUL, else "".
func text(v any) string {
	var s string
	switch t := v.(type) {
	case string:
		s = t
	case json.Number: // the strict reader's numbers
		if _, err := t.Int64(); err == nil {
			s = t.String()
		}
	case float64:
		if t == float64(int64(t)) {
			s = strconv.FormatInt(int64(t), 10)
		}
	}
	if len(s) > maxPurchaseText || !utf8.ValidString(s) || hasNUL(s) {
		return ""
	}
	return s
}

// metadata is a provider's metadata object as the purchase keeps it: its
// string (and number) values, at most maxPurchaseMetadata of them; nil
// when it has none.
func metadata(v any) map[string]string {
	m, _ := v.(map[string]any)
	out := map[string]string{}
	for k, v := range m {
		if len(out) == maxPurchaseMetadata {
			break
		}
		if s := text(v); s != "" && text(k) == k {
			out[k] = s
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// quantity is a line's quantity where it is a whole number, else nil.
func quantity(v any) *int64 {
	var n int64
	switch t := v.(type) {
	case json.Number: // the strict reader's numbers
		i, err := t.Int64()
		if err != nil {
			return nil
		}
		n = i
	case float64:
		if t != float64(int64(t)) {
			return nil
		}
		n = int64(t)
	default:
		return nil
	}
	if n < 0 {
		return nil
	}
	return &n
}

// customer is a purchase's customer as its event states it; nil when it
// states neither id nor email.
func customer(id, email string) *Customer {
	if id == "" && email == "" {
		return nil
	}
	return &Customer{ID: id, Email: email}
}

// modeOf is the mode an event's own test flag states.
func modeOf(test bool) string {
	if test {
		return string(ModeTest)
	}
	return string(ModeLive)
}

// addItem appends it to items, unless it names neither product nor price
// (nothing a route could match or a receiver read) or items hold as many
// as a purchase keeps.
func addItem(items []Item, it Item) []Item {
	if (it.Product == "" && it.Price == "") || len(items) == maxPurchaseItems {
		return items
	}
	return append(items, it)
}

// prefixedID reads an id of the provider's that starts with prefix
// ("sub_", "txn_", "I-"); "" for anything else, an id too long to be real,
// or one holding a NUL.
func prefixedID(v any, prefix string) string {
	id, _ := v.(string)
	if !strings.HasPrefix(id, prefix) || len(id) > maxIDLength || hasNUL(id) {
		return ""
	}
	return id
}

// basePurchase is the purchase every paid event states at least: its
// provider, payment and what was paid.
func basePurchase(ev Event) *Purchase {
	p := &Purchase{Provider: ev.Provider, ID: ev.PaymentID}
	if ev.Paid != nil {
		minor := ev.Paid.Minor
		p.Amount, p.Currency = &minor, ev.Paid.Currency
	}
	return p
}

// PurchaseOf is the purchase a paid event states, with mode as the
// deployment's where the provider left it empty: the provider's own
// reading (Event.Purchase) where it made one, else what every paid event
// says (provider, payment, amount). Nil for an event that does not fulfil.
func PurchaseOf(ev Event, mode Mode) *Purchase {
	if !ev.Fulfils() {
		return nil
	}
	p := ev.Purchase
	if p == nil {
		p = basePurchase(ev)
	}
	if p.Amount == nil && ev.Paid != nil {
		minor := ev.Paid.Minor
		p.Amount, p.Currency = &minor, ev.Paid.Currency
	}
	if p.Mode == "" {
		p.Mode = string(mode)
	}
	if p.Mode == "" {
		p.Mode = string(ModeLive)
	}
	return fit(p)
}

// WithItems is p with the items a provider's API listed for it (where its
// event names none: Event.ItemsRef), at most as many as a purchase keeps,
// fitted like every purchase.
func WithItems(p Purchase, items []Item) *Purchase {
	p.Items = slices.Clone(items[:min(len(items), maxPurchaseItems)])
	return fit(&p)
}

// fit bounds p to contract.MaxPurchaseBytes marshalled, so every request
// fits its envelope (contract.EnvelopeBytes): it drops the last items,
// then metadata keys from the last in order, until it fits. Routes match
// on the purchase as fitted, the one receivers are sent.
func fit(p *Purchase) *Purchase {
	size := func() int {
		b, _ := json.Marshal(p)
		return len(b)
	}
	if size() <= contract.MaxPurchaseBytes {
		return p
	}
	q := *p
	p = &q
	p.Items = slices.Clone(p.Items)
	p.Metadata = maps.Clone(p.Metadata)
	keys := slices.Sorted(maps.Keys(p.Metadata))
	for (len(p.Items) > 0 || len(keys) > 0) && size() > contract.MaxPurchaseBytes {
		if len(p.Items) >= len(keys) {
			p.Items = p.Items[:len(p.Items)-1]
		} else {
			delete(p.Metadata, keys[len(keys)-1])
			keys = keys[:len(keys)-1]
		}
	}
	if size() > contract.MaxPurchaseBytes { // a customer's email of 500 bytes and the like
		p.Customer = nil
	}
	return p
}

// standing reads a subscription's status that is no end, by the names its
// provider gives: past_due and paused suspend it, the active ones say it
// is active (it resumes), anything else is neither, and why for the log.
func standing(id, status string, active ...string) (suspension *Reversal, resumes, note string) {
	switch {
	case status == "past_due":
		return &Reversal{Kind: Suspension, Subscription: id, Standing: PastDue}, "", ""
	case status == "paused":
		return &Reversal{Kind: Suspension, Subscription: id, Standing: Paused}, "", ""
	case slices.Contains(active, status):
		return nil, id, ""
	}
	return nil, "", "subscription " + strconv.Quote(truncate(status, 40)) + ": neither ended, suspended nor active"
}
