package web

import (
	"sync"
	"time"
)

// activity counts this process's deliveries per minute over the last hour,
// by outcome, for the dashboard. Duplicates caught by the Redis filter never
// reach Postgres, so only the process that answered them can count them.
type activity struct {
	mu      sync.Mutex
	buckets [60]minuteCounts
}

type minuteCounts struct {
	minute   int64 // Unix minute the bucket holds; older means empty
	New      int
	DupRedis int
	DupPG    int
	Rejected int
	Failed   int // 5xx: storage unavailable
}

func (a *activity) record(at time.Time, kind outcomeKind) {
	m := at.Unix() / 60
	a.mu.Lock()
	defer a.mu.Unlock()
	b := &a.buckets[m%60]
	if b.minute != m {
		*b = minuteCounts{minute: m}
	}
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

// lastHour returns 60 buckets, oldest first, ending at now's minute.
func (a *activity) lastHour(now time.Time) []minuteCounts {
	end := now.Unix() / 60
	out := make([]minuteCounts, 60)
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range out {
		m := end - 59 + int64(i)
		if b := a.buckets[m%60]; b.minute == m {
			out[i] = b
		} else {
			out[i] = minuteCounts{minute: m}
		}
	}
	return out
}
