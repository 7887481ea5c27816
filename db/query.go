package db

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/state"
)

// ListParams filters and pages a fulfilment listing. Zero fields do not filter.
type ListParams struct {
	State     state.State
	Provider  string
	PaymentID string
	EventID   string
	// Type is the event type of the fulfilment's event.
	Type string
	// PaymentPrefix and EventPrefix find ids that start with them: pi_demo
	// finds pi_demo_0622f7f2.
	PaymentPrefix, EventPrefix string
	// Since and Until bound created_at: Since <= created_at < Until.
	Since, Until time.Time
	// Limit caps the page; defaults to 50, at most 500.
	Limit int
	// Cursor continues a previous listing (its NextCursor).
	Cursor string
}

// ErrBadCursor means a cursor was not one this package made.
var ErrBadCursor = errors.New("invalid cursor")

// ListFulfilments returns fulfilments oldest first, and a cursor for the
// next page when there may be one.
func ListFulfilments(ctx context.Context, q DBTX, p ListParams) ([]Fulfilment, string, error) {
	limit := pageLimit(p.Limit)
	var afterTime time.Time
	var afterID string
	if p.Cursor != "" {
		var err error
		if afterTime, afterID, err = decodeCursor(p.Cursor); err != nil {
			return nil, "", err
		}
	}
	rows, err := q.Query(ctx, `
		SELECT `+prefixed("f.", fulfilmentColumns)+`
		FROM fulfilment f JOIN webhook_event e ON e.id = f.event_pk
		WHERE ($1 = '' OR f.state = $1)
		  AND ($2 = '' OR f.provider = $2)
		  AND ($3 = '' OR f.payment_id = $3)
		  AND ($4 = '' OR e.event_id = $4)
		  AND ($5::timestamptz IS NULL OR f.created_at >= $5)
		  AND ($6::timestamptz IS NULL OR f.created_at < $6)
		  AND ($7::timestamptz IS NULL OR (f.created_at, f.id) > ($7, $8::uuid))
		  AND ($10 = '' OR e.event_type = $10)
		  AND ($11 = '' OR (`+prefixMatch("e.payment_id", "$11")+`))
		  AND ($12 = '' OR (`+prefixMatch("e.event_id", "$12")+`))
		ORDER BY f.created_at, f.id
		LIMIT $9`,
		p.State, p.Provider, p.PaymentID, p.EventID, nullTime(p.Since), nullTime(p.Until), nullTime(afterTime), nullUUID(afterID), limit+1,
		p.Type, p.PaymentPrefix, p.EventPrefix)
	if err != nil {
		return nil, "", wrap("list fulfilments", err)
	}
	fs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Fulfilment, error) { return scanFulfilment(r) })
	if err != nil {
		return nil, "", wrap("list fulfilments", err)
	}
	next := ""
	if len(fs) > limit {
		fs = fs[:limit]
		last := fs[len(fs)-1]
		next = encodeCursor(last.CreatedAt, last.ID)
	}
	return fs, next, nil
}

// prefixMatch is the SQL that column starts with param: a range in the
// "C" collation, which the C-collated indexes on webhook_event's ids serve
// (migration 00016), and starts_with for exactness. U+10FFFF is the
// greatest code point, so every id with the prefix sorts below the bound
// but one that continues with U+10FFFF itself, a noncharacter.
func prefixMatch(column, param string) string {
	return column + ` COLLATE "C" >= ` + param + ` AND ` + column + ` COLLATE "C" < ` + param + ` || U&'\+10FFFF' AND starts_with(` + column + `, ` + param + `)`
}

// pageLimit clamps a page size: 50 by default, at most 500.
func pageLimit(n int) int {
	if n <= 0 {
		return 50
	}
	return min(n, 500)
}

func prefixed(prefix, columns string) string {
	parts := strings.Split(columns, ", ")
	for i, c := range parts {
		parts[i] = prefix + c
	}
	return strings.Join(parts, ", ")
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func nullUUID(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func encodeCursor(t time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(t.UnixMicro(), 10) + "|" + id))
}

func decodeCursor(c string) (time.Time, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", ErrBadCursor
	}
	ts, id, ok := strings.Cut(string(raw), "|")
	micros, err := strconv.ParseInt(ts, 10, 64)
	if !ok || err != nil || !ValidUUID(id) {
		return time.Time{}, "", ErrBadCursor
	}
	return time.UnixMicro(micros), id, nil
}

// encodeIDCursor and decodeIDCursor page by a bigint row id.
func encodeIDCursor(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("id|" + strconv.FormatInt(id, 10)))
}

func decodeIDCursor(c string) (int64, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, ErrBadCursor
	}
	n, ok := strings.CutPrefix(string(raw), "id|")
	id, err := strconv.ParseInt(n, 10, 64)
	if !ok || err != nil || id <= 0 {
		return 0, ErrBadCursor
	}
	return id, nil
}

// ValidUUID reports whether s is a UUID in its canonical text form, so a
// malformed id from outside is "not found" rather than a database error.
func ValidUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
				return false
			}
		}
	}
	return true
}

// Stats is the shape of the fulfilment table at one moment.
type Stats struct {
	ByState map[state.State]int
	// OldestNeedsReconciliation is when the longest-waiting parked
	// fulfilment was parked; nil when none waits.
	OldestNeedsReconciliation *time.Time
	// OldestPending is when the longest-waiting pending fulfilment entered
	// pending; nil when none waits.
	OldestPending *time.Time
	// FulfilledCountedAt is when ByState's fulfilled count was taken, when
	// a StatsReader gives an earlier count; zero when counted with the rest.
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

	mu        sync.Mutex
	recount   time.Duration
	fulfilled int
	countedAt time.Time // zero: count at the next read
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
		r.fulfilled, r.countedAt = st.ByState[state.Fulfilled], time.Now()
	}
	st.ByState[state.Fulfilled], st.FulfilledCountedAt = r.fulfilled, r.countedAt
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
	st := Stats{ByState: counts}
	// Two statements, so each min is one step down fulfilment_state_idx.
	for s, dst := range map[state.State]**time.Time{state.NeedsReconciliation: &st.OldestNeedsReconciliation, state.Pending: &st.OldestPending} {
		if err := q.QueryRow(ctx, `SELECT min(updated_at) FROM fulfilment WHERE state = $1`, s).Scan(dst); err != nil {
			return Stats{}, wrap("oldest "+string(s), err)
		}
	}
	return st, nil
}

// Check is one reconciliation lookup's answer.
type Check struct {
	ID           int64
	FulfilmentID string
	Attempt      int
	Actor        string
	Answer       string
	Evidence     json.RawMessage
	CreatedAt    time.Time
}

// DueForCheck returns parked fulfilments whose next lookup is due: parked
// for at least grace and past the parked claim's own deadline (so a call
// still in flight at the receiver can finish), and past their backoff,
// oldest first.
func DueForCheck(ctx context.Context, q DBTX, grace time.Duration, limit int) ([]Fulfilment, error) {
	rows, err := q.Query(ctx, `
		SELECT `+fulfilmentColumns+` FROM fulfilment
		WHERE state = 'needs_reconciliation'
		  AND updated_at <= now() - make_interval(secs => $1)
		  AND (deadline IS NULL OR deadline <= now())
		  AND (next_check_at IS NULL OR next_check_at <= now())
		ORDER BY updated_at, id
		LIMIT $2`, grace.Seconds(), limit)
	if err != nil {
		return nil, wrap("due for check", err)
	}
	fs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Fulfilment, error) { return scanFulfilment(r) })
	return fs, wrap("due for check", err)
}

// RecordCheck logs a lookup's answer and schedules the next lookup after
// backoff, if, and only if, the fulfilment is still parked at the same
// attempt: an answer about a row that moved on is not recorded, and
// ErrConflict says so.
func RecordCheck(ctx context.Context, q DBTX, id string, attempt int, actor, answer string, evidence any, backoff time.Duration) error {
	ev, err := json.Marshal(evidence)
	if err != nil {
		return fmt.Errorf("marshal evidence: %w", err)
	}
	tag, err := q.Exec(ctx, `
		WITH bumped AS (
			UPDATE fulfilment SET checks = checks + 1, next_check_at = now() + make_interval(secs => $6)
			WHERE id = $1 AND state = 'needs_reconciliation' AND attempt = $2
			RETURNING id
		)
		INSERT INTO fulfilment_check (fulfilment_id, attempt, actor, answer, evidence)
		SELECT id, $2, $3, $4, $5 FROM bumped`,
		id, attempt, actor, answer, string(ev), backoff.Seconds())
	if err != nil {
		return wrap("record check", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrConflict
	}
	return nil
}

// Checks returns the lookups of one or more fulfilments in one query,
// oldest first.
func Checks(ctx context.Context, q DBTX, fulfilmentIDs ...string) ([]Check, error) {
	rows, err := q.Query(ctx, `
		SELECT id, fulfilment_id, attempt, actor, answer, evidence, created_at
		FROM fulfilment_check WHERE fulfilment_id = ANY($1::uuid[]) ORDER BY id`, fulfilmentIDs)
	if err != nil {
		return nil, wrap("list checks", err)
	}
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Check, error) {
		var c Check
		var ev []byte
		err := r.Scan(&c.ID, &c.FulfilmentID, &c.Attempt, &c.Actor, &c.Answer, &ev, &c.CreatedAt)
		c.Evidence = ev
		return c, err
	})
	return cs, wrap("list checks", err)
}

// GetEventByPK returns the event stored under its row id.
func GetEventByPK(ctx context.Context, q DBTX, pk int64) (Event, error) {
	e, err := scanEvent(q.QueryRow(ctx, `SELECT `+eventColumns+` FROM webhook_event WHERE id = $1`, pk))
	return e, wrap("get event", err)
}

// FulfilmentsByEvent returns every fulfilment an event created, oldest first.
func FulfilmentsByEvent(ctx context.Context, q DBTX, eventPK int64) ([]Fulfilment, error) {
	rows, err := q.Query(ctx, `SELECT `+fulfilmentColumns+` FROM fulfilment WHERE event_pk = $1 ORDER BY created_at, id`, eventPK)
	if err != nil {
		return nil, wrap("list fulfilments by event", err)
	}
	fs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Fulfilment, error) { return scanFulfilment(r) })
	return fs, wrap("list fulfilments by event", err)
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
