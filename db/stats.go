package db

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/state"
)

// Stats is the shape of the fulfilment table at one moment.
type Stats struct {
	ByState map[state.State]int
	// Revocations counts the revocations (rows with action revoke, which
	// ByState counts too) by state.
	Revocations map[state.State]int
	// OldestNeedsReconciliation is when the longest-waiting parked
	// fulfilment was parked; nil when none waits.
	OldestNeedsReconciliation *time.Time
	// OldestPending is when the longest-waiting pending fulfilment entered
	// pending; nil when none waits.
	OldestPending *time.Time
	// FulfilledCountedAt is when the fulfilled counts (ByState's and
	// Revocations') were taken, when a StatsReader gives an earlier count;
	// zero when counted with the rest.
	FulfilledCountedAt time.Time
}

// StatsReader reads Stats for a reader that asks often (the metrics'
// periodic read, the dashboard's overview): every read counts the states
// that stay small through fulfilment_state_idx, and fulfilled, the state
// that grows with all history and that only a scan of the table can count,
// once every recount (DefaultRecount); between, it gives the last count, with its time in
// Stats.FulfilledCountedAt. Safe for concurrent use.
type StatsReader struct {
	q DBTX

	mu      sync.Mutex
	recount time.Duration
	// fulfilled and revoked are the last counts of fulfilled fulfilments
	// and of fulfilled revocations (both grow with history), taken at
	// countedAt.
	fulfilled, revoked int
	countedAt          time.Time // zero: count at the next read
}

// DefaultRecount is how often a StatsReader counts fulfilled rows unless
// told otherwise (SetRecount).
const DefaultRecount = 5 * time.Minute

// Time a statistics read may take: a full count reads the whole table.
const (
	statsTimeout     = 5 * time.Second
	fullStatsTimeout = time.Minute
)

// NewStatsReader returns a StatsReader over q that recounts fulfilled rows
// every DefaultRecount.
func NewStatsReader(q DBTX) *StatsReader {
	return &StatsReader{q: q, recount: DefaultRecount}
}

// SetRecount sets how often fulfilled rows are counted.
func (r *StatsReader) SetRecount(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recount = d
}

// notFulfilled are the states a regular read counts.
var notFulfilled = func() []state.State {
	var out []state.State
	for _, s := range state.All {
		if s != state.Fulfilled {
			out = append(out, s)
		}
	}
	return out
}()

// Read returns the table's shape now, fulfilled as of its last count.
func (r *StatsReader) Read(ctx context.Context) (Stats, error) {
	r.mu.Lock()
	all := r.countedAt.IsZero() || time.Since(r.countedAt) >= r.recount
	r.mu.Unlock()
	states, timeout := notFulfilled, statsTimeout
	if all {
		states, timeout = nil, fullStatsTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := GetStats(ctx, r.q, states...)
	if err != nil {
		return Stats{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if all {
		r.fulfilled, r.revoked, r.countedAt = st.ByState[state.Fulfilled], st.Revocations[state.Fulfilled], time.Now()
	}
	st.ByState[state.Fulfilled], st.Revocations[state.Fulfilled], st.FulfilledCountedAt = r.fulfilled, r.revoked, r.countedAt
	return st, nil
}

// Forget makes the next read count every state.
func (r *StatsReader) Forget() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.countedAt = time.Time{}
}

// GetStats counts fulfilments per state (every state, or only those named:
// see CountByState) and finds the oldest parked and the oldest pending one.
func GetStats(ctx context.Context, q DBTX, states ...state.State) (Stats, error) {
	counts, err := CountByState(ctx, q, states...)
	if err != nil {
		return Stats{}, err
	}
	revocations, err := CountRevocationsByState(ctx, q, states...)
	if err != nil {
		return Stats{}, err
	}
	st := Stats{ByState: counts, Revocations: revocations}
	// Two statements, so each min is one step down fulfilment_state_idx.
	for s, dst := range map[state.State]**time.Time{state.NeedsReconciliation: &st.OldestNeedsReconciliation, state.Pending: &st.OldestPending} {
		if err := q.QueryRow(ctx, `SELECT min(updated_at) FROM fulfilment WHERE state = $1`, s).Scan(dst); err != nil {
			return Stats{}, wrap("oldest "+string(s), err)
		}
	}
	return st, nil
}

// DispatchOutcomesSince counts moves out of dispatching since t, by the
// state they led to: how dispatch has gone lately.
func DispatchOutcomesSince(ctx context.Context, q DBTX, t time.Time) (map[string]int, error) {
	rows, err := q.Query(ctx, `SELECT to_state, count(*) FROM fulfilment_transition
		WHERE from_state = 'dispatching' AND created_at >= $1 GROUP BY to_state`, t)
	if err != nil {
		return nil, wrap("dispatch outcomes", err)
	}
	out := map[string]int{}
	var st string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&st, &n}, func() error { out[st] = n; return nil })
	return out, wrap("dispatch outcomes", err)
}
