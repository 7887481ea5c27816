package db_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
)

// TestPipelinedTxSavesTwoRoundTrips: InPipelinedTx sends BEGIN with the
// first statement and COMMIT with the one named last, so a transaction of
// three statements is three writes on the wire (InTx's is five), and
// what it wrote is committed, visible to another connection, when the last
// statement's rows are read, before Commit is called. In both of pgx's
// modes Guardian runs: its default, and exec mode behind a transaction
// pooler.
func TestPipelinedTxSavesTwoRoundTrips(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, `CREATE TABLE piped (id int PRIMARY KEY)`)
	require.NoError(t, err)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		t.Run(mode.String(), func(t *testing.T) {
			store, writes := countedStore(t, d, mode)
			write := func(inTx func(context.Context, func(pgx.Tx) error) error, base int) (int64, bool) {
				var seen bool
				n0 := writes.Load()
				require.NoError(t, inTx(ctx, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `INSERT INTO piped VALUES ($1)`, base); err != nil {
						return err
					}
					if _, err := tx.Exec(ctx, `INSERT INTO piped VALUES ($1)`, base+1); err != nil {
						return err
					}
					db.CommitWithNext(tx)
					var n int
					if err := tx.QueryRow(ctx, `INSERT INTO piped VALUES ($1) RETURNING id`, base+2).Scan(&n); err != nil {
						return err
					}
					seen = d.Count(t, `SELECT count(*) FROM piped WHERE id BETWEEN $1 AND $1 + 2`, base) == 3
					return nil
				}))
				return writes.Load() - n0, seen
			}
			base := 10
			if mode == pgx.QueryExecModeExec {
				base = 100
			}
			write(store.InPipelinedTx, base) // the first run prepares the statements
			n, seen := write(store.InPipelinedTx, base+10)
			require.EqualValues(t, 3, n, "BEGIN with the first statement, COMMIT with the last")
			require.True(t, seen, "committed with the last statement")
			n, seen = write(store.InTx, base+20)
			require.EqualValues(t, 5, n, "InTx: BEGIN, three statements, COMMIT")
			require.False(t, seen, "InTx commits after fn returns")
			// One statement, sent with its BEGIN and its COMMIT.
			n0 := writes.Load()
			require.NoError(t, store.InPipelinedTx(ctx, func(tx pgx.Tx) error {
				db.CommitWithNext(tx)
				_, err := tx.Exec(ctx, `INSERT INTO piped VALUES ($1)`, base+30)
				return err
			}))
			require.EqualValues(t, 1, writes.Load()-n0, "BEGIN, the statement and COMMIT in one round trip")
			require.Equal(t, 1, d.Count(t, `SELECT count(*) FROM piped WHERE id = $1`, base+30))
		})
	}
}

// TestPipelinedTxFailsWhole: a statement that fails, the one sent with
// BEGIN or the one sent with COMMIT, leaves nothing of its transaction
// (Postgres skips the COMMIT after it), its error is the caller's, and the
// connection is clean for the next transaction; so is one fn abandons.
func TestPipelinedTxFailsWhole(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, `CREATE TABLE piped (id int PRIMARY KEY); INSERT INTO piped VALUES (1)`)
	require.NoError(t, err)
	store, _ := countedStore(t, d, pgx.QueryExecModeCacheStatement) // one connection: each case reuses it
	var pgErr *pgconn.PgError
	abandoned := errors.New("abandoned")
	for name, fn := range map[string]func(tx pgx.Tx) error{
		"first statement": func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO piped VALUES (2), (1)`)
			return err
		},
		"last statement": func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO piped VALUES (3)`); err != nil {
				return err
			}
			db.CommitWithNext(tx)
			rows, err := tx.Query(ctx, `INSERT INTO piped VALUES (4), (1) RETURNING id`)
			if err != nil {
				return err
			}
			_, err = pgx.CollectRows(rows, pgx.RowTo[int])
			return err
		},
		"only statement, sent with BEGIN and COMMIT": func(tx pgx.Tx) error {
			db.CommitWithNext(tx)
			_, err := tx.Exec(ctx, `INSERT INTO piped VALUES (5), (1)`)
			return err
		},
		"abandoned by fn": func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO piped VALUES (6)`); err != nil {
				return err
			}
			return abandoned
		},
	} {
		err := store.InPipelinedTx(ctx, fn)
		if name == "abandoned by fn" {
			require.ErrorIs(t, err, abandoned)
		} else {
			require.ErrorAs(t, err, &pgErr, name)
			require.Equal(t, "23505", pgErr.Code, name)
		}
		require.Equal(t, 1, d.Count(t, `SELECT count(*) FROM piped`), "%s: nothing of the transaction was kept", name)
		require.NoError(t, store.InPipelinedTx(ctx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT 1`)
			return err
		}), "%s: the connection is clean after it", name)
	}
	require.NoError(t, store.InPipelinedTx(ctx, func(pgx.Tx) error { return nil }), "a transaction of no statements")
}

// countedStore is a Store over d's CountedPool.
func countedStore(t *testing.T, d *dbtest.DB, mode pgx.QueryExecMode) (*db.Store, *atomic.Int64) {
	pool, writes := d.CountedPool(t, mode)
	return db.New(pool), writes
}

// TestPipelinedTxNests: what pgx offers on a transaction works on a
// pipelined one, begun or not yet: a nested transaction is a savepoint,
// whose rollback keeps what came before it, and a batch goes in the
// transaction.
func TestPipelinedTxNests(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, `CREATE TABLE piped (id int PRIMARY KEY)`)
	require.NoError(t, err)
	store := db.New(d.Pool)
	insert := func(tx pgx.Tx, id int) error {
		_, err := tx.Exec(ctx, `INSERT INTO piped VALUES ($1)`, id)
		return err
	}
	require.NoError(t, store.InPipelinedTx(ctx, func(tx pgx.Tx) error {
		nested, err := tx.Begin(ctx) // before any statement: BEGIN goes alone
		if err != nil {
			return err
		}
		if err := insert(nested, 1); err != nil {
			return err
		}
		if err := nested.Rollback(ctx); err != nil {
			return err
		}
		if err := insert(tx, 2); err != nil {
			return err
		}
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO piped VALUES (3)`)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		nested, err = tx.Begin(ctx)
		if err != nil {
			return err
		}
		if err := insert(nested, 4); err != nil {
			return err
		}
		return nested.Commit(ctx)
	}))
	rows, err := d.Pool.Query(ctx, `SELECT id FROM piped ORDER BY id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.Equal(t, []int{2, 3, 4}, ids, "the rolled-back savepoint's row alone is gone")
}
