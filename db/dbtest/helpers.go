package dbtest

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest/pgserver"
)

// Count returns the single integer query answers on d, such as
// `SELECT count(*) FROM fulfilment WHERE payment_id = $1`. It is the one row
// counter every package's tests use.
func (d *DB) Count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := d.Pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("count (%s): %v", query, err)
	}
	return n
}

// Fulfilment returns one fulfilment as it stands.
func (d *DB) Fulfilment(t testing.TB, id string) db.Fulfilment {
	t.Helper()
	f, err := db.GetFulfilment(context.Background(), d.Pool, id)
	if err != nil {
		t.Fatalf("get fulfilment %s: %v", id, err)
	}
	return f
}

// WaitState waits, polling every 10 ms for up to 15 s, until the fulfilment
// is in want, and returns it; it fails the test with the last state seen.
func (d *DB) WaitState(t testing.TB, id string, want state.State) db.Fulfilment {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		f := d.Fulfilment(t, id)
		if f.State == want {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("fulfilment %s never reached %s (last: %s)", id, want, f.State)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Transitions returns a fulfilment's audit log, oldest first.
func (d *DB) Transitions(t testing.TB, id string) []db.Transition {
	t.Helper()
	ts, err := db.Transitions(context.Background(), d.Pool, id)
	if err != nil {
		t.Fatalf("transitions of %s: %v", id, err)
	}
	return ts
}

// ForceDispatching leaves a pending fulfilment as a crashed dispatcher
// would: claimed, attempt taken, dispatched at the given time, no outcome
// recorded. Its claim's deadline is at: the call it stands for could not
// be in flight after that (the tests' connector timeouts are short).
func (d *DB) ForceDispatching(t testing.TB, id string, at time.Time) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.ClaimForDispatch(ctx, d.Pool, db.ClaimParams{ID: id, Actor: "crashed dispatcher", Timeout: 30 * time.Second}); err != nil {
		t.Fatalf("claim %s: %v", id, err)
	}
	d.backdate(t, `UPDATE fulfilment_move SET dispatched_at = $2, deadline = $2 WHERE id = $1`, id, at)
}

// Backdate moves a fulfilment's clocks back to at: when it last moved
// (updated_at) and, if it was dispatched later than at, when it was
// dispatched, as if it had been parked (or created) at that time. The
// trigger that stamps updated_at is bypassed for this one statement.
func (d *DB) Backdate(t testing.TB, id string, at time.Time) {
	t.Helper()
	d.backdate(t, `UPDATE fulfilment_move SET updated_at = $2, dispatched_at = least(dispatched_at, $2),
		deadline = least(deadline, $2::timestamptz + (deadline - dispatched_at)) WHERE id = $1`, id, at)
}

func (d *DB) backdate(t testing.TB, stmt, id string, at time.Time) {
	t.Helper()
	ctx := context.Background()
	tx, err := d.Pool.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
		t.Fatalf("bypass triggers: %v", err)
	}
	if _, err := tx.Exec(ctx, stmt, id, at); err != nil {
		t.Fatalf("backdate %s: %v", id, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

// OtherConns counts the server's connections to the database but the
// test's own pool: what the processes or the pooler under test hold.
// Polled under load, it returns the error rather than failing the test.
func (d *DB) OtherConns(ctx context.Context) (int, error) {
	var n int
	if err := d.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, d.Name).Scan(&n); err != nil {
		return 0, err
	}
	return n - int(d.Pool.Stat().TotalConns()), nil
}

// FreePort returns a loopback TCP port that was free at the time of the
// call and that it has not returned before, for a server a test starts.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := pgserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// PostgresOwner says, when the test runs as root, which uid and gid the
// servers it starts run as (pgserver.Owner). who names them in the
// failure when there is no postgres user.
func PostgresOwner(t testing.TB, who string) (uid, gid int, root bool) {
	t.Helper()
	uid, gid, root, err := pgserver.Owner()
	if err != nil {
		t.Fatalf("%s: %v", who, err)
	}
	return uid, gid, root
}

// CountedPool is a pool of one connection to d in pgx's mode whose writes
// on the wire are counted: pgx writes once per round trip (a statement, or
// a batch with its Sync), so the count says how many a piece of work took.
func (d *DB) CountedPool(t testing.TB, mode pgx.QueryExecMode) (*pgxpool.Pool, *atomic.Int64) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(d.URL)
	if err != nil {
		t.Fatalf("counted pool: %v", err)
	}
	cfg.MaxConns = 1
	cfg.ConnConfig.DefaultQueryExecMode = mode
	writes := new(atomic.Int64)
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countedConn{Conn: c, writes: writes}, nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("counted pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool, writes
}

// countedConn counts a connection's writes.
type countedConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countedConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// Listen listens, on a connection of its own until the test ends, on the
// channel River's notifications of topic take in the database's schema
// (the schema's name, a dot and the topic); next waits up to wait for the
// next notification and returns its payload, false if none came.
func (d *DB) Listen(t testing.TB, topic string) (next func(wait time.Duration) (payload string, ok bool)) {
	t.Helper()
	ctx := context.Background()
	conn, err := d.Pool.Acquire(ctx)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() {
		_, _ = conn.Exec(ctx, `UNLISTEN *`)
		conn.Release()
	})
	var channel string
	if err := conn.QueryRow(ctx, `SELECT current_schema() || '.' || $1`, topic).Scan(&channel); err != nil {
		t.Fatalf("listen: %v", err)
	}
	if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatalf("listen on %s: %v", channel, err)
	}
	return func(wait time.Duration) (string, bool) {
		ctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return "", false
		}
		return n.Payload, true
	}
}
