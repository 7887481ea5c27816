package web

import (
	"maps"
	"slices"
	"sync"
	"time"
)

// activity counts this process's deliveries per minute over the last hour,
// by outcome, in all and per provider, for the dashboard. Duplicates caught
// by the Redis filter never reach Postgres, so only the process that
// answered them can count them. Only served providers are counted: the map
// holds at most one hour of buckets per provider Guardian serves.
type activity struct {
	mu         sync.Mutex
	all        hour
	byProvider map[string]*hour
}

// hour is sixty one-minute buckets, indexed by Unix minute modulo 60.
type hour [60]minuteCounts

type minuteCounts struct {
	minute   int64 // Unix minute the bucket holds; older means empty
	New      int
	DupRedis int
	DupPG    int
	Rejected int
	Failed   int // 5xx: storage unavailable
}

// add counts one delivery of kind in the bucket.
func (b *minuteCounts) add(kind outcomeKind) {
	switch kind {
	case kindStored:
		b.New++
	case kindDuplicateFilter:
		b.DupRedis++
	case kindDuplicatePostgres:
		b.DupPG++
	case kindUnavailable:
		b.Failed++
	case kindRefused:
		b.Rejected++
	}
	// A sender that left before the answer is none of these: it retries.
}

// Duplicates counts the duplicates caught, by Redis or by Postgres.
func (b minuteCounts) Duplicates() int { return b.DupRedis + b.DupPG }

// plus returns the sum of two buckets' counts.
func (b minuteCounts) plus(o minuteCounts) minuteCounts {
	b.New += o.New
	b.DupRedis += o.DupRedis
	b.DupPG += o.DupPG
	b.Rejected += o.Rejected
	b.Failed += o.Failed
	return b
}

// record counts one delivery to provider, answered at at.
func (a *activity) record(at time.Time, provider string, kind outcomeKind) {
	m := at.Unix() / 60
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.byProvider == nil {
		a.byProvider = map[string]*hour{}
	}
	h := a.byProvider[provider]
	if h == nil {
		h = &hour{}
		a.byProvider[provider] = h
	}
	for _, h := range []*hour{&a.all, h} {
		b := &h[m%60]
		if b.minute != m {
			*b = minuteCounts{minute: m}
		}
		b.add(kind)
	}
}

// lastHour returns 60 buckets of all providers, oldest first, ending at
// now's minute.
func (a *activity) lastHour(now time.Time) []minuteCounts {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.all.window(now)
}

// providerTotals returns each of providers' totals over the last hour, in
// their order; a provider nothing was delivered to has a zero row.
func (a *activity) providerTotals(now time.Time, providers []string) []providerActivity {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]providerActivity, len(providers))
	for i, name := range providers {
		out[i].Provider = name
		if h := a.byProvider[name]; h != nil {
			for _, b := range h.window(now) {
				out[i].Counts = out[i].Counts.plus(b)
			}
		}
	}
	return out
}

// providerActivity is one provider's deliveries over the last hour.
type providerActivity struct {
	Provider string
	Counts   minuteCounts
}

// window returns the hour's 60 buckets, oldest first, ending at now's
// minute; a bucket of an older minute reads as empty.
func (h *hour) window(now time.Time) []minuteCounts {
	end := now.Unix() / 60
	out := make([]minuteCounts, 60)
	for i := range out {
		m := end - 59 + int64(i)
		if b := h[m%60]; b.minute == m {
			out[i] = b
		} else {
			out[i] = minuteCounts{minute: m}
		}
	}
	return out
}

// sortedNames returns a map's keys in order.
func sortedNames[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
