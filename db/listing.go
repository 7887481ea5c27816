package db

import (
	"context"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/app/state"
)

// Listings: fulfilments by filters, a page at a time, and the cursors that
// continue them.

// ListParams filters and pages a fulfilment listing. Zero fields do not filter.
type ListParams struct {
	State     state.State
	Provider  string
	PaymentID string
	EventID   string
	// Type is the event type of the fulfilment's event.
	Type string
	// Action is the action of the purchase the rows perform ("licence").
	Action string
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
	// The order (created_at, id) is held by an index of each table: the
	// state's (fulfilment_state_created) is the moving row's, the
	// provider's and time's alone the identity's. A listing by state
	// takes its order from the moving row's copy of created_at, any other
	// from the identity's; the two are equal, but the planner can use an
	// index only for the column named (migration 00050).
	order := "f"
	if p.State != "" {
		order = "s"
	}
	rows, err := q.Query(ctx, `
		SELECT `+fulfilmentOf("f", "s")+`
		FROM fulfilment_identity f JOIN fulfilment_move s ON s.id = f.id JOIN webhook_event e ON e.id = f.event_pk
		WHERE ($1 = '' OR s.state = $1)
		  AND ($2 = '' OR f.provider = $2)
		  AND ($3 = '' OR f.payment_id = $3)
		  AND ($4 = '' OR e.event_id = $4)
		  AND ($5::timestamptz IS NULL OR `+order+`.created_at >= $5)
		  AND ($6::timestamptz IS NULL OR `+order+`.created_at < $6)
		  AND ($7::timestamptz IS NULL OR (`+order+`.created_at, `+order+`.id) > ($7, $8::uuid))
		  AND ($10 = '' OR e.event_type = $10)
		  AND ($11 = '' OR (`+prefixMatch("e.payment_id", "$11")+`))
		  AND ($12 = '' OR (`+prefixMatch("e.event_id", "$12")+`))
		  AND ($13 = '' OR f.action_name = $13)
		ORDER BY `+order+`.created_at, `+order+`.id
		LIMIT $9`,
		p.State, p.Provider, p.PaymentID, p.EventID, nullTime(p.Since), nullTime(p.Until), nullTime(afterTime), nullUUID(afterID), limit+1,
		p.Type, p.PaymentPrefix, p.EventPrefix, p.Action)
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
