package db

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Credential is one operator credential; the token itself is never stored.
type Credential struct {
	ID            int64
	Operator      string
	CreatedAt     time.Time
	SessionsAfter *time.Time
	RevokedAt     *time.Time
}

const credentialColumns = `id, operator, created_at, sessions_after, revoked_at`

func scanCredential(row pgx.Row) (Credential, error) {
	var c Credential
	err := row.Scan(&c.ID, &c.Operator, &c.CreatedAt, &c.SessionsAfter, &c.RevokedAt)
	return c, err
}

// AddCredential stores a credential for operator by its token's hash.
func AddCredential(ctx context.Context, q DBTX, operator string, hash []byte) (Credential, error) {
	c, err := scanCredential(q.QueryRow(ctx, `
		INSERT INTO operator_credential (operator, token_hash) VALUES ($1, $2)
		RETURNING `+credentialColumns, operator, hash))
	return c, wrap("add credential", err)
}

// ActiveCredential returns the unrevoked credential whose token hashes to
// hash, or ErrNotFound.
func ActiveCredential(ctx context.Context, q DBTX, hash []byte) (Credential, error) {
	c, err := scanCredential(q.QueryRow(ctx, `
		SELECT `+credentialColumns+` FROM operator_credential
		WHERE token_hash = $1 AND revoked_at IS NULL`, hash))
	return c, wrap("read credential", err)
}

// ActiveCredentialByID returns the unrevoked credential id, or ErrNotFound.
func ActiveCredentialByID(ctx context.Context, q DBTX, id int64) (Credential, error) {
	c, err := scanCredential(q.QueryRow(ctx, `
		SELECT `+credentialColumns+` FROM operator_credential
		WHERE id = $1 AND revoked_at IS NULL`, id))
	return c, wrap("read credential", err)
}

// Credentials lists every credential, revoked ones included, by operator.
func Credentials(ctx context.Context, q DBTX) ([]Credential, error) {
	rows, err := q.Query(ctx, `SELECT `+credentialColumns+` FROM operator_credential ORDER BY operator, id`)
	if err != nil {
		return nil, wrap("list credentials", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Credential, error) { return scanCredential(r) })
	return out, wrap("list credentials", err)
}

// RevokeCredentials revokes the active credentials of operator, or only
// credential id when id is not 0, and returns how many it revoked.
func RevokeCredentials(ctx context.Context, q DBTX, operator string, id int64) (int64, error) {
	tag, err := q.Exec(ctx, `
		UPDATE operator_credential SET revoked_at = now()
		WHERE operator = $1 AND ($2 = 0 OR id = $2) AND revoked_at IS NULL`, operator, id)
	return tag.RowsAffected(), wrap("revoke credentials", err)
}

// EndSessions ends the dashboard sessions of operator's credentials begun
// before now, leaving the credentials valid, and returns how many
// credentials it touched.
func EndSessions(ctx context.Context, q DBTX, operator string) (int64, error) {
	tag, err := q.Exec(ctx, `
		UPDATE operator_credential SET sessions_after = now()
		WHERE operator = $1 AND revoked_at IS NULL`, operator)
	return tag.RowsAffected(), wrap("end sessions", err)
}

// Secret returns the server secret name (see migration 00014).
func Secret(ctx context.Context, q DBTX, name string) ([]byte, error) {
	var v []byte
	err := q.QueryRow(ctx, `SELECT value FROM guardian_secret WHERE name = $1`, name).Scan(&v)
	return v, wrap("read secret "+name, err)
}
