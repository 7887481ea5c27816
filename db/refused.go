package db

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Refusal is one refused webhook request. It holds nothing the sender wrote
// (migration 00015).
type Refusal struct {
	ID        int64
	At        time.Time
	Provider  string
	Reason    string
	Detail    string
	Client    string
	BodyBytes int
}

// InsertRefusals records refusals in one statement.
func InsertRefusals(ctx context.Context, q DBTX, rs []Refusal) error {
	n := len(rs)
	at, providers, reasons, details, clients, sizes := make([]time.Time, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]int32, n)
	for i, r := range rs {
		at[i], providers[i], reasons[i], details[i], clients[i], sizes[i] = r.At, r.Provider, r.Reason, truncateRunes(r.Detail, 300), r.Client, int32(r.BodyBytes)
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
