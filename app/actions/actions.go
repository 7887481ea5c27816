// Package actions holds what a purchase pays for (docs/design.md,
// "Actions: what a purchase pays for"): each action, its receiver and its
// take-back policy, and the routes that say which purchases pay for which
// actions. A Set is read once at start, from the actions file or from the
// one connector URL, and never changes while the process runs.
package actions

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"slices"
	"time"

	"github.com/guardian-pay/guardian/app/provider"
)

// Fulfil is the action of a deployment without an actions file: the one
// connector URL, matching every paid purchase, under the keys Guardian has
// always derived.
const Fulfil = "fulfil"

// namePattern is what an action's name may be: it is hashed into keys
// beside a ':' separator, labels metrics and names a column value, so it is
// short, lower case and has no ':'.
var namePattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,39}$`)

// ValidName reports whether name may name an action.
func ValidName(name string) bool { return namePattern.MatchString(name) }

// Action is one thing a purchase pays for, performed exactly once per
// purchase at its own receiver.
type Action struct {
	Name string `json:"name"`
	// Description is one line for operators.
	Description string `json:"description,omitempty"`
	// Receiver is where the action is performed.
	Receiver Receiver `json:"receiver"`
	// TakeBack is what reversals take the action back for once done;
	// empty: nothing (the receiver is never sent a revoke).
	TakeBack Policy `json:"take_back"`
	// Line is where the action is declared in the file; 0 without one.
	Line int `json:"line,omitempty"`
}

// Receiver is where an action is performed (docs/receivers.md).
type Receiver struct {
	URL string `json:"url"`
	// LookupURL answers lookups by key ("{key}" in it); empty: parked
	// rows wait for an operator.
	LookupURL string `json:"lookup_url,omitempty"`
	// Secrets sign requests and verify the receiver's statements: the
	// first is current, the others are still accepted while rotating.
	// Never shown, logged or marshalled.
	Secrets []string `json:"-"`
	// SecretEnv names the variable the secrets were read from, for
	// operators; empty for the connector's own setting.
	SecretEnv string `json:"secret_env,omitempty"`
	// Timeout bounds one call, connection included.
	Timeout time.Duration `json:"timeout"`
}

// Reverses reports whether any action of s is taken back for r: a
// reversal that takes none back does not reverse the payment.
func (s *Set) Reverses(r provider.Reversal) bool { return len(s.Revoking(r)) > 0 }

// Revoking names the actions of s that r takes back, in s's order.
func (s *Set) Revoking(r provider.Reversal) []string {
	var names []string
	for _, a := range s.Actions {
		if a.TakeBack.Revokes(r) {
			names = append(names, a.Name)
		}
	}
	return names
}

// Set is a deployment's actions and routes.
type Set struct {
	// Actions in the order declared.
	Actions []Action `json:"actions"`
	// Routes in the order declared.
	Routes []Route `json:"routes"`
	// Source is the file the set was read from; empty for the one
	// connector URL.
	Source string `json:"source,omitempty"`
	// Digest names the set's text (SHA-256 of the file, or of the
	// default's description): recorded with each purchase it routes, so
	// an operator can tell which routes decided a purchase.
	Digest string `json:"digest"`
}

// Route says which purchases pay for which actions. Every criterion given
// must hold; within a list any value will do. A criterion on a field the
// purchase does not state (no items, no kind) does not hold.
type Route struct {
	Name    string   `json:"name,omitempty"`
	Actions []string `json:"actions"`
	Match   Match    `json:"match"`
	// Line is where the route is declared in the file; 0 without one.
	Line int `json:"line,omitempty"`
}

// Match is a route's criteria; the zero Match matches every purchase.
type Match struct {
	Providers  []string          `json:"provider,omitempty"`
	Kinds      []provider.Kind   `json:"kind,omitempty"`
	Products   []string          `json:"products,omitempty"`
	Prices     []string          `json:"prices,omitempty"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	Present    []string          `json:"metadata_present,omitempty"`
	Mode       provider.Mode     `json:"mode,omitempty"`
	Currencies []string          `json:"currency,omitempty"`
	// MinAmount and MaxAmount bound the amount paid, inclusive, in minor
	// units of one of Currencies.
	MinAmount *int64 `json:"min_amount,omitempty"`
	MaxAmount *int64 `json:"max_amount,omitempty"`
}

// Matches reports whether p meets every criterion of m.
func (m Match) Matches(p *provider.Purchase) bool {
	switch {
	case len(m.Providers) > 0 && !slices.Contains(m.Providers, p.Provider),
		len(m.Kinds) > 0 && !slices.Contains(m.Kinds, p.Kind),
		m.Mode != "" && string(m.Mode) != p.Mode,
		len(m.Currencies) > 0 && !slices.Contains(m.Currencies, p.Currency):
		return false
	}
	if len(m.Products) > 0 && !slices.ContainsFunc(p.Items, func(it provider.Item) bool { return slices.Contains(m.Products, it.Product) }) {
		return false
	}
	if len(m.Prices) > 0 && !slices.ContainsFunc(p.Items, func(it provider.Item) bool { return slices.Contains(m.Prices, it.Price) }) {
		return false
	}
	for k, v := range m.Metadata {
		if got, ok := p.Metadata[k]; !ok || got != v {
			return false
		}
	}
	for _, k := range m.Present {
		if _, ok := p.Metadata[k]; !ok {
			return false
		}
	}
	if m.MinAmount != nil || m.MaxAmount != nil {
		if p.Amount == nil || (m.MinAmount != nil && *p.Amount < *m.MinAmount) || (m.MaxAmount != nil && *p.Amount > *m.MaxAmount) {
			return false
		}
	}
	return true
}

// NeedsItems reports whether a route that may match a purchase of the
// provider named matches on what was bought (products or prices): where
// the provider's paid event lists no items, they are fetched before the
// purchase is routed (provider.Event.ItemsRef).
func (s *Set) NeedsItems(providerName string) bool {
	return slices.ContainsFunc(s.Routes, func(r Route) bool {
		m := r.Match
		return (len(m.Products) > 0 || len(m.Prices) > 0) && (len(m.Providers) == 0 || slices.Contains(m.Providers, providerName))
	})
}

// Route names the actions p pays for: the union of the actions of every
// route that matches it, each once, in the order the actions are declared.
func (s *Set) Route(p *provider.Purchase) []string {
	var hit []string
	for _, r := range s.Routes {
		if r.Match.Matches(p) {
			hit = append(hit, r.Actions...)
		}
	}
	names := []string{}
	for _, a := range s.Actions {
		if slices.Contains(hit, a.Name) {
			names = append(names, a.Name)
		}
	}
	return names
}

// Action returns the action named, if s has it.
func (s *Set) Action(name string) (Action, bool) {
	i := slices.IndexFunc(s.Actions, func(a Action) bool { return a.Name == name })
	if i < 0 {
		return Action{}, false
	}
	return s.Actions[i], true
}

// Names are the names of s's actions, in order.
func (s *Set) Names() []string {
	names := make([]string, len(s.Actions))
	for i, a := range s.Actions {
		names[i] = a.Name
	}
	return names
}

// Default is the set of a deployment without an actions file: one action,
// Fulfil, at the connector URL, matching every paid purchase. Its keys are
// the ones Guardian derived before actions existed, so an upgrade sends no
// payment under a new key.
func Default(r Receiver, takeBack Policy) *Set {
	s := &Set{
		Actions: []Action{{Name: Fulfil, Receiver: r, TakeBack: takeBack}},
		Routes:  []Route{{Name: "every paid purchase", Actions: []string{Fulfil}}},
	}
	sum := sha256.Sum256([]byte("guardian/default:" + Fulfil))
	s.Digest = hex.EncodeToString(sum[:8])
	return s
}
