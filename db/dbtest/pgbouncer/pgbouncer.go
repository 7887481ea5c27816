// Package pgbouncer puts a private PgBouncer in transaction mode in front
// of a test's Postgres server, as a deployment that pools connections runs
// it (docs/deployment.md, "Behind PgBouncer"). It listens on loopback, trusts
// every user the server trusts, and stops when the test ends.
//
// PgBouncer refuses to run as root: a root test runs it as the postgres
// user. Without the binary a test fails with a message saying how to get
// it; it never skips.
package pgbouncer

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
)

// Bouncer is one running PgBouncer.
type Bouncer struct {
	// Addr is where it listens, host:port.
	Addr string
	// PoolSize is how many server connections it opens per database and
	// user at most: what Postgres sees, however many clients it has.
	PoolSize int
	log      string
	cmd      *exec.Cmd
	exited   chan struct{}
	once     sync.Once
}

// Start runs a PgBouncer in transaction mode in front of the Postgres
// server serverURL names: it sends every database there, over at most
// poolSize server connections per database.
func Start(t testing.TB, serverURL string, poolSize int) *Bouncer {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatalf("pgbouncer: the server's URL: %v", err)
	}
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer"} {
			if _, statErr := os.Stat(p); statErr == nil {
				bin, err = p, nil
			}
		}
	}
	if err != nil {
		t.Fatalf("pgbouncer is not installed: install it (Debian: apt-get install -y pgbouncer; `just deps` does) to run the suites that pool connections")
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		t.Fatalf("pgbouncer: the server's address %q: %v", u.Host, err)
	}
	dir, err := os.MkdirTemp("", "guardian-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	listenPort := strconv.Itoa(dbtest.FreePort(t))
	b := &Bouncer{Addr: "127.0.0.1:" + listenPort, PoolSize: poolSize, log: filepath.Join(dir, "pgbouncer.log"), exited: make(chan struct{})}
	ini := strings.Join([]string{
		"[databases]",
		fmt.Sprintf("* = host=%s port=%s", host, port),
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		"listen_port = " + listenPort,
		"unix_socket_dir =",
		"auth_type = trust",
		"auth_file = " + filepath.Join(dir, "users.txt"),
		"pool_mode = transaction",
		"default_pool_size = " + strconv.Itoa(poolSize),
		"reserve_pool_size = 0",
		"max_client_conn = 1000",
		"admin_users = postgres",
		"logfile = " + b.log,
		"",
	}, "\n")
	write(t, filepath.Join(dir, "pgbouncer.ini"), ini)
	write(t, filepath.Join(dir, "users.txt"), `"postgres" ""`+"\n")
	b.cmd = exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	// It dies with the test process, also one that panics before its
	// cleanups run. The kernel forgets a parent-death signal when the
	// child changes its own user (PgBouncer's -u), so a root test starts
	// it as the postgres user instead: the signal is set after that.
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if uid, gid, asPostgres := dbtest.PostgresOwner(t, "PgBouncer"); asPostgres {
		for _, p := range []string{dir, filepath.Join(dir, "pgbouncer.ini"), filepath.Join(dir, "users.txt")} {
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
		b.cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("start pgbouncer: %v", err)
	}
	go func() { _ = b.cmd.Wait(); close(b.exited) }()
	t.Cleanup(b.Stop)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", b.Addr, time.Second)
		if err == nil {
			c.Close()
			return b
		}
		select {
		case <-b.exited:
			t.Fatalf("pgbouncer exited at start:\n%s", b.Log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer does not listen on %s: %v\n%s", b.Addr, err, b.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// URL is dbURL (a Postgres URL) sent through the bouncer instead.
func (b *Bouncer) URL(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		panic(fmt.Sprintf("pgbouncer: not a URL: %v", err))
	}
	u.Host = b.Addr
	return u.String()
}

// Connect opens a pool of at most maxConns connections through the
// bouncer to the database dbURL names, with Guardian's db.Connect set up
// for pooler; it is closed when the test ends.
func (b *Bouncer) Connect(t testing.TB, dbURL string, pooler db.Pooler, maxConns int) *pgxpool.Pool {
	t.Helper()
	u, err := url.Parse(b.URL(dbURL))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", strconv.Itoa(maxConns))
	u.RawQuery = q.Encode()
	pool, err := db.Connect(context.Background(), u.String(), pooler)
	if err != nil {
		t.Fatalf("connect through pgbouncer: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Clients is how many client connections PgBouncer holds now, active or
// waiting for a server connection: what its clients see, beside the
// PoolSize that Postgres sees.
func (b *Bouncer) Clients(t testing.TB) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The admin console speaks only the simple protocol.
	conn, err := pgx.Connect(ctx, "postgres://postgres@"+b.Addr+"/pgbouncer?sslmode=disable&default_query_exec_mode=simple_protocol")
	if err != nil {
		t.Fatalf("pgbouncer's admin console: %v", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SHOW CLIENTS")
	if err != nil {
		t.Fatalf("pgbouncer: SHOW CLIENTS: %v", err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("pgbouncer: SHOW CLIENTS: %v", err)
	}
	return n - 1 // less the console's own
}

// Log is what PgBouncer has logged.
func (b *Bouncer) Log() string {
	out, _ := os.ReadFile(b.log)
	return string(out)
}

// Stop ends it; safe more than once.
func (b *Bouncer) Stop() {
	b.once.Do(func() {
		_ = b.cmd.Process.Kill()
		<-b.exited
	})
}

func write(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
