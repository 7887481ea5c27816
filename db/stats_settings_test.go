package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
)

// TestStatisticsGoStale: Guardian says at start when nothing keeps the
// planner's statistics of the tables a payment writes, the server's
// autovacuum or a table's own setting, and names what turned it off.
func TestStatisticsGoStale(t *testing.T) {
	ctx := context.Background()
	tx := dbtest.Tx(t)
	var server string
	require.NoError(t, tx.QueryRow(ctx, `SHOW autovacuum`).Scan(&server))

	stale, why, err := db.StatisticsGoStale(ctx, tx)
	require.NoError(t, err)
	require.Equal(t, server == "off", stale, "the server's own setting decides, no table turning it off")
	if stale {
		require.Contains(t, why, "autovacuum is off: ")
		require.Contains(t, why, "ANALYZE")
	}

	_, err = tx.Exec(ctx, `ALTER TABLE fulfilment_move SET (autovacuum_enabled = false)`)
	require.NoError(t, err)
	stale, why, err = db.StatisticsGoStale(ctx, tx)
	require.NoError(t, err)
	require.True(t, stale, "a table a payment writes with autovacuum off")
	if server == "off" {
		require.Contains(t, why, "autovacuum is off, and by their own setting for fulfilment_move: ",
			"the table named too, since turning the server's on would leave it off")
	} else {
		require.Contains(t, why, "autovacuum is off for fulfilment_move: ")
	}

	// The server's setting and a table's, whatever this server has.
	require.Empty(t, db.StaleStatistics("on", nil))
	require.Contains(t, db.StaleStatistics("off", nil), "autovacuum is off: ")
	require.Contains(t, db.StaleStatistics("on", []string{"fulfilment", "river_job"}), "autovacuum is off for fulfilment, river_job: ")
	require.Contains(t, db.StaleStatistics("off", []string{"river_job"}), "autovacuum is off, and by their own setting for river_job: ")
}

// TestInvalidIndexes: Guardian names at start each index an interrupted
// build left invalid, with the statement that repairs it (a REINDEX's own
// leftovers are dropped, not rebuilt), and leaves out an index another
// session is building at that moment, which is invalid until its build
// ends: a node starting while another migrates is told nothing false.
func TestInvalidIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := dbtest.NewDB(t)
	invalid := func() []db.InvalidIndex {
		t.Helper()
		got, err := db.InvalidIndexes(ctx, d.Pool)
		require.NoError(t, err)
		return got
	}
	require.Empty(t, invalid(), "a migrated schema")

	// What interrupted builds leave: a CREATE INDEX CONCURRENTLY's index,
	// and a REINDEX CONCURRENTLY's new copy and the old index it had not
	// yet dropped.
	_, err := d.Pool.Exec(ctx, `
		CREATE INDEX webhook_event_half_built ON webhook_event (event_type);
		CREATE INDEX fulfilment_created_ccnew ON fulfilment_identity (created_at, id);
		CREATE INDEX fulfilment_created_ccold1 ON fulfilment_identity (created_at, id);
		UPDATE pg_index SET indisvalid = false
		WHERE indexrelid IN ('webhook_event_half_built'::regclass, 'fulfilment_created_ccnew'::regclass, 'fulfilment_created_ccold1'::regclass)`)
	require.NoError(t, err)
	require.Equal(t, []db.InvalidIndex{
		{Name: "fulfilment_created_ccnew", Repair: "DROP INDEX CONCURRENTLY fulfilment_created_ccnew"},
		{Name: "fulfilment_created_ccold1", Repair: "DROP INDEX CONCURRENTLY fulfilment_created_ccold1"},
		{Name: "webhook_event_half_built", Repair: "REINDEX INDEX CONCURRENTLY webhook_event_half_built"},
	}, invalid())
	_, err = d.Pool.Exec(ctx, `DROP INDEX webhook_event_half_built, fulfilment_created_ccnew, fulfilment_created_ccold1`)
	require.NoError(t, err)

	// Builds in progress: a transaction that has written to the table and
	// stays open holds a build CONCURRENTLY after it has made its index,
	// invalid, and before it builds it.
	inProgress := func(build, invalidName string) {
		t.Helper()
		writer, err := d.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = writer.Rollback(ctx) }()
		_, err = writer.Exec(ctx, `INSERT INTO webhook_event (provider, event_id, event_type, body) VALUES ('stripe', 'evt_open', 't', '{}')`)
		require.NoError(t, err)
		built := make(chan error, 1)
		go func() {
			_, err := d.Pool.Exec(ctx, build)
			built <- err
		}()
		require.Eventually(t, func() bool {
			var waiting bool
			require.NoError(t, d.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_progress_create_index WHERE relid = 'webhook_event'::regclass
					AND datid = (SELECT oid FROM pg_database WHERE datname = current_database()))
				AND EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass($1) AND NOT indisvalid)`, invalidName).Scan(&waiting))
			return waiting
		}, 30*time.Second, 20*time.Millisecond, "%s, waiting for the open writer with its index made", build)
		require.Empty(t, invalid(), "an index being built named as if its build had been interrupted: %s", build)
		require.NoError(t, writer.Rollback(ctx))
		require.NoError(t, <-built)
		require.Empty(t, invalid(), "the index once built: %s", build)
	}
	inProgress(`CREATE INDEX CONCURRENTLY webhook_event_being_built ON webhook_event (event_type)`, "webhook_event_being_built")
	inProgress(`REINDEX INDEX CONCURRENTLY webhook_event_being_built`, "webhook_event_being_built_ccnew")
}
