package db_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
)

// TestReadOnlyServersAreLeft: a pooled connection whose server turns
// read-only (a primary fenced by a failover; Postgres reports it to the
// session) is closed at its next use, with ErrReadOnly, and the pool dials
// a new one, instead of keeping a connection that can only answer 25006;
// a database every new session of which is read-only (a standby) is
// refused the same way until it is writable again.
func TestReadOnlyServersAreLeft(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := dbtest.NewDB(t)
	sep := "?"
	if strings.Contains(d.URL, "?") {
		sep = "&"
	}
	pool, err := db.Connect(ctx, d.URL+sep+"pool_max_conns=1", db.NoPooler)
	require.NoError(t, err)
	defer pool.Close()
	write := func() error {
		_, err := pool.Exec(ctx, `INSERT INTO prune_cursor (name, last_id) VALUES ('readonly_test', 1) ON CONFLICT (name) DO UPDATE SET last_id = prune_cursor.last_id + 1`)
		return err
	}
	require.NoError(t, write())

	// The one pooled connection's server turns read-only under it.
	_, err = pool.Exec(ctx, `SET default_transaction_read_only = on`)
	require.NoError(t, err)
	err = write()
	require.ErrorIs(t, err, db.ErrReadOnly, "never the server's 25006")
	var pgErr *pgconn.PgError
	require.False(t, errors.As(err, &pgErr))
	require.NoError(t, write(), "the next use dials a new connection, writable")

	// Every new session read-only, as on a standby: refused, then back.
	_, err = pool.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{d.Name}.Sanitize()+` SET default_transaction_read_only = on`)
	require.NoError(t, err)
	pool.Reset()
	require.ErrorIs(t, write(), db.ErrReadOnly)
	admin, err := db.Connect(ctx, dbtest.ServerURL(t), db.NoPooler)
	require.NoError(t, err)
	defer admin.Close()
	_, err = admin.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{d.Name}.Sanitize()+` RESET default_transaction_read_only`)
	require.NoError(t, err)
	require.NoError(t, write())
}
