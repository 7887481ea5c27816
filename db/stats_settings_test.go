package db_test

import (
	"context"
	"testing"

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

	_, err = tx.Exec(ctx, `ALTER TABLE fulfilment SET (autovacuum_enabled = false)`)
	require.NoError(t, err)
	stale, why, err = db.StatisticsGoStale(ctx, tx)
	require.NoError(t, err)
	require.True(t, stale, "a table a payment writes with autovacuum off")
	if server == "off" {
		require.Contains(t, why, "autovacuum is off, and by their own setting for fulfilment: ",
			"the table named too, since turning the server's on would leave it off")
	} else {
		require.Contains(t, why, "autovacuum is off for fulfilment: ")
	}

	// The server's setting and a table's, whatever this server has.
	require.Empty(t, db.StaleStatistics("on", nil))
	require.Contains(t, db.StaleStatistics("off", nil), "autovacuum is off: ")
	require.Contains(t, db.StaleStatistics("on", []string{"fulfilment", "river_job"}), "autovacuum is off for fulfilment, river_job: ")
	require.Contains(t, db.StaleStatistics("off", []string{"river_job"}), "autovacuum is off, and by their own setting for river_job: ")
}
