package db_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
	"github.com/guardian-pay/guardian/db/dbtest/pgbouncer"
	"github.com/guardian-pay/guardian/goose"
)

// TestTransactionPooler runs Guardian's queries through a real PgBouncer in
// transaction mode with one server connection and many clients, as a
// pooled deployment does. With GUARDIAN_DB_POOLER=transaction every query
// succeeds, however its transactions interleave on the one server session;
// without it, pgx's statement cache names a prepared statement on the
// server, a second client's identical query meets it there, and Postgres
// refuses (42P05 or 26000), which is why the setting exists. Migrations run
// through it as well.
func TestTransactionPooler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := dbtest.NewDB(t)
	b := pgbouncer.Start(t, d.URL, 1)

	// hammer runs the queries from eight clients at once, twenty times each,
	// and returns each client's first error.
	hammer := func(pool *pgxpool.Pool) error {
		errs := make([]error, 8)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					_, err := db.CountByState(ctx, pool, state.Pending, state.Fulfilled)
					if err == nil {
						_, err = db.FulfilmentsByPayment(ctx, pool, "stripe", "pi_pooled")
					}
					if err != nil {
						errs[i] = err
						return
					}
				}
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	}

	pooled := b.Connect(t, d.URL, db.TransactionPooler, 8)
	require.NoError(t, hammer(pooled), "behind a transaction pooler, with the pooler named")
	servers, err := d.OtherConns(ctx)
	require.NoError(t, err)
	require.Equal(t, b.PoolSize, servers, "eight clients, and Postgres should see PgBouncer's one server connection")
	// `guardian migrate` runs through the pooler too: every migration down
	// and up again.
	m, err := goose.NewMigrator(pooled)
	require.NoError(t, err)
	defer m.Close()
	for {
		_, err := m.Down(ctx)
		if errors.Is(err, goose.ErrNoNextVersion) {
			break
		}
		require.NoError(t, err)
	}
	_, err = m.Up(ctx)
	require.NoError(t, err)
	current, err := m.Current(ctx)
	require.NoError(t, err)
	require.True(t, current, "migrated up through the pooler")

	err = hammer(b.Connect(t, d.URL, db.NoPooler, 8))
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "pgx's statement cache survived a transaction pooler: the test no longer shows why the setting exists")
	require.Contains(t, []string{"42P05", "26000"}, pgErr.Code, "%v", err)
}

// TestPoolerSettingChecked: an unknown pooler, or a query mode that keeps
// state in the session behind a transaction pooler, is refused with the
// variable named, before any connection is made.
func TestPoolerSettingChecked(t *testing.T) {
	t.Parallel()
	const base = "postgres://guardian:s3cret@db.internal:5432/guardian"
	require.NoError(t, db.CheckPooler(base, db.NoPooler))
	require.NoError(t, db.CheckPooler(base, db.TransactionPooler))
	require.NoError(t, db.CheckPooler(base+"?default_query_exec_mode=simple_protocol", db.TransactionPooler))
	require.NoError(t, db.CheckPooler(base+"?default_query_exec_mode=cache_statement", db.NoPooler))

	err := db.CheckPooler(base, "session")
	require.ErrorContains(t, err, "GUARDIAN_DB_POOLER")
	err = db.CheckPooler(base+"?default_query_exec_mode=cache_statement", db.TransactionPooler)
	require.ErrorContains(t, err, "default_query_exec_mode")
	require.NotContains(t, err.Error(), "s3cret")
	_, err = db.Connect(context.Background(), base+"?default_query_exec_mode=describe_exec", db.TransactionPooler)
	require.ErrorContains(t, err, "default_query_exec_mode (describe_exec)", "named as the URL spells it")
}

// TestMigrationsAtOnceBehindAPooler: two processes migrating one empty
// database at the same moment through PgBouncer in transaction mode
// apply every migration once. A session advisory lock does not hold there
// (its lock and unlock may run on different server sessions, and two
// clients may share one); the migration lock is a row (goose's table
// locker), which does.
func TestMigrationsAtOnceBehindAPooler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := dbtest.NewDB(t)
	b := pgbouncer.Start(t, d.URL, 4)
	direct, err := goose.NewMigrator(d.Pool)
	require.NoError(t, err)
	defer direct.Close()
	for round := range 2 {
		for {
			_, err := direct.Down(ctx)
			if errors.Is(err, goose.ErrNoNextVersion) {
				break
			}
			require.NoError(t, err)
		}
		start := make(chan struct{})
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range errs {
			m, err := goose.NewMigrator(b.Connect(t, d.URL, db.TransactionPooler, 4))
			require.NoError(t, err)
			defer m.Close()
			wg.Go(func() {
				<-start
				_, errs[i] = m.Up(ctx)
			})
		}
		close(start)
		wg.Wait()
		require.NoError(t, errors.Join(errs...), "round %d: two migrators at once", round)
		var applied, distinct int
		require.NoError(t, d.Pool.QueryRow(ctx, `
			SELECT count(*), count(DISTINCT version_id) FROM goose_db_version WHERE version_id > 0 AND is_applied`).Scan(&applied, &distinct))
		require.Equal(t, distinct, applied, "round %d: a migration was applied twice", round)
		current, err := direct.Current(ctx)
		require.NoError(t, err)
		require.True(t, current)
	}
}
