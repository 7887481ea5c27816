package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// serverCost is what the Postgres server did, read from its cumulative
// statistics: the WAL it wrote, how many full-page images that WAL held
// (the first change to a page after a checkpoint logs the whole 8 kB
// page), the checkpoints that completed, the blocks the database had to
// read because shared buffers did not hold them, and the buffers backends
// had to write out themselves to make room. Two readings around a run
// give that run's cost; divided by its deliveries, the cost of one.
type serverCost struct {
	walBytes, fpi, checkpoints, blocksRead, backendWrites float64
}

// readServerCost reads the server's counters; the block reads are the
// database's named by dbURL (the WAL and checkpoints are the server's).
func readServerCost(ctx context.Context, pool *pgxpool.Pool, dbURL string) serverCost {
	var c serverCost
	check(pool.QueryRow(ctx, `SELECT w.wal_bytes::float8, w.wal_fpi::float8,
		(b.checkpoints_timed + b.checkpoints_req)::float8, b.buffers_backend::float8,
		(SELECT blks_read::float8 FROM pg_stat_database WHERE datname = $1)
		FROM pg_stat_wal w, pg_stat_bgwriter b`, dbName(dbURL)).
		Scan(&c.walBytes, &c.fpi, &c.checkpoints, &c.backendWrites, &c.blocksRead))
	return c
}

// perDelivery is the cost between two readings, per delivery of n.
func (c serverCost) perDelivery(before serverCost, n int) serverCost {
	d := float64(max(n, 1))
	return serverCost{
		walBytes:      (c.walBytes - before.walBytes) / d,
		fpi:           (c.fpi - before.fpi) / d,
		checkpoints:   c.checkpoints - before.checkpoints, // a count, not per delivery
		blocksRead:    (c.blocksRead - before.blocksRead) / d,
		backendWrites: (c.backendWrites - before.backendWrites) / d,
	}
}

func (c serverCost) String() string {
	return fmt.Sprintf("%.1f kB WAL, %.2f full pages, %.2f blocks read, %.2f backend writes per delivery; %.0f checkpoints",
		c.walBytes/1024, c.fpi, c.blocksRead, c.backendWrites, c.checkpoints)
}
