package db

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// RefusalReason says why a webhook request was refused. The reasons are
// one list, RefusalReasons, which the refused_delivery_reason_check
// constraint (migration 00031) and the OpenAPI description's
// Refusal.reason repeat; a test holds the three equal.
type RefusalReason string

// The reasons a webhook request is refused.
const (
	// RefusedSignature: no configured secret produced the signature.
	RefusedSignature RefusalReason = "signature"
	// RefusedTimestamp: the signed time is outside the tolerance.
	RefusedTimestamp RefusalReason = "timestamp"
	// RefusedMalformed: the body is not an event the provider sends.
	RefusedMalformed RefusalReason = "malformed"
	// RefusedMode: a well-signed event of the other mode (test money at a
	// live deployment).
	RefusedMode RefusalReason = "mode"
	// RefusedForeign: a well-signed delivery for an account the deployment
	// does not serve (another shop of a public Shopify app).
	RefusedForeign RefusalReason = "foreign"
	// RefusedRebound: a second body under one signed transmission id
	// (PayPal's, whose signature binds the body by CRC32 only).
	RefusedRebound RefusalReason = "rebound"
	// RefusedTooLarge: the body exceeds the cap.
	RefusedTooLarge RefusalReason = "too_large"
	// RefusedUnreadable: the body could not be read.
	RefusedUnreadable RefusalReason = "unreadable"
	// RefusedUnknownProvider: no provider is served at the path.
	RefusedUnknownProvider RefusalReason = "unknown_provider"
	// RefusedInvalid: any other refusal.
	RefusedInvalid RefusalReason = "invalid"
)

// RefusalReasons lists every reason, in the order the constraint does.
var RefusalReasons = []RefusalReason{RefusedSignature, RefusedTimestamp, RefusedMalformed, RefusedMode, RefusedForeign,
	RefusedRebound, RefusedTooLarge, RefusedUnreadable, RefusedUnknownProvider, RefusedInvalid}

// Refusal is one refused webhook request. It holds nothing the sender wrote
// (migration 00015).
type Refusal struct {
	ID        int64
	At        time.Time
	Provider  string
	Reason    RefusalReason
	Detail    string
	Client    string
	BodyBytes int
}

// InsertRefusals records refusals in one statement.
func InsertRefusals(ctx context.Context, q DBTX, rs []Refusal) error {
	n := len(rs)
	at, providers, reasons, details, clients, sizes := make([]time.Time, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]int32, n)
	for i, r := range rs {
		at[i], providers[i], reasons[i], details[i], clients[i], sizes[i] = r.At, r.Provider, string(r.Reason), truncateRunes(r.Detail, 300), r.Client, int32(r.BodyBytes)
	}
	_, err := q.Exec(ctx, `
		INSERT INTO refused_delivery (at, provider, reason, detail, client, body_bytes)
		SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int[])`,
		at, providers, reasons, details, clients, sizes)
	return wrap("record refusals", err)
}

// Refusals lists refusals newest first, before id (0: from the newest).
func Refusals(ctx context.Context, q DBTX, before int64, limit int) ([]Refusal, error) {
	rows, err := q.Query(ctx, `
		SELECT id, at, provider, reason, detail, client, body_bytes FROM refused_delivery
		WHERE $1 = 0 OR id < $1 ORDER BY id DESC LIMIT $2`, before, limit)
	if err != nil {
		return nil, wrap("list refusals", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Refusal, error) {
		var x Refusal
		err := r.Scan(&x.ID, &x.At, &x.Provider, &x.Reason, &x.Detail, &x.Client, &x.BodyBytes)
		return x, err
	})
	return out, wrap("list refusals", err)
}

// PruneRefusals deletes refusals older than before, and all but the newest
// keep, and returns how many it deleted.
func (s *Store) PruneRefusals(ctx context.Context, before time.Time, keep int) (int64, error) {
	tag, err := s.pool.Exec(ctx, `
		DELETE FROM refused_delivery
		WHERE at < $1 OR id <= (SELECT id FROM refused_delivery ORDER BY id DESC OFFSET $2 LIMIT 1)`, before, keep)
	return tag.RowsAffected(), wrap("prune refusals", err)
}

// truncateRunes cuts s to at most n characters of valid, NUL-free UTF-8,
// which Postgres text can hold.
func truncateRunes(s string, n int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n])
}
