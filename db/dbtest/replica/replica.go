// Package replica gives failover tests a Postgres primary and a streaming
// standby of their own: two private servers on loopback, made with initdb
// and pg_basebackup from the machine's PostgreSQL server binaries, removed
// when the test ends. A test crashes the primary, promotes the standby and
// points a deployment at both through a multi-host URL, as an HA pair is
// run (docs/deployment.md, "A Postgres that fails over").
//
// The binaries come from `pg_config --bindir`. Postgres refuses to run as
// root: a root test runs them as the postgres user. Without the binaries a
// test fails with a message saying how to get them; it never skips.
package replica

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardian-pay/guardian/db/dbtest"
	"github.com/guardian-pay/guardian/db/dbtest/pgserver"
)

// Replication is how the primary commits with respect to its standby.
type Replication int

const (
	// Sync: a commit returns once the standby has the WAL
	// (synchronous_standby_names names it, synchronous_commit on). An
	// acknowledged commit survives the primary's loss.
	Sync Replication = iota
	// Async: a commit returns once the primary has it; the standby follows
	// when it can. What it had not received when the primary was lost is
	// lost with it.
	Async
)

// standbyName is the standby's application_name, which the primary's
// synchronous_standby_names waits for.
const standbyName = "guardian_standby"

// Server is one private Postgres server.
type Server struct {
	Name string
	Dir  string
	Port int
	pair *Pair
}

// Pair is a primary and its standby.
type Pair struct {
	Primary, Standby *Server
	t                testing.TB
	bin              *pgserver.Binaries
}

// Start makes a primary, takes a base backup of it into a standby that
// streams from it, starts both and waits until the standby streams (and,
// under Sync, is the synchronous standby).
func Start(t testing.TB, mode Replication) *Pair {
	t.Helper()
	bin, err := pgserver.Find("initdb", "pg_ctl", "pg_basebackup")
	if err != nil {
		t.Fatalf("failover tests: %v", err)
	}
	p := &Pair{t: t, bin: bin}
	root, err := os.MkdirTemp("", "guardian-replica-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	p.own(root)
	p.Primary = &Server{Name: "primary", Dir: filepath.Join(root, "primary"), Port: dbtest.FreePort(t), pair: p}
	p.Standby = &Server{Name: "standby", Dir: filepath.Join(root, "standby"), Port: dbtest.FreePort(t), pair: p}
	t.Cleanup(func() {
		for _, s := range []*Server{p.Standby, p.Primary} {
			_ = p.bin.Stop(s.Dir, "immediate")
		}
	})

	p.must(p.bin.Init(p.Primary.Dir))
	sync := ""
	if mode == Sync {
		sync = standbyName
	}
	p.Primary.configure(map[string]string{
		"synchronous_standby_names": pgserver.Quote(sync),
		// A paused or slow standby must not make the primary recycle WAL
		// it still needs.
		"wal_keep_size": "'256MB'",
	})
	p.Primary.start()
	p.must(p.bin.Run(nil, "pg_basebackup", "--host=127.0.0.1", "--port="+strconv.Itoa(p.Primary.Port), "--username=postgres",
		"--pgdata="+p.Standby.Dir, "--wal-method=stream", "--checkpoint=fast", "--no-sync"))
	signal := filepath.Join(p.Standby.Dir, "standby.signal")
	if err := os.WriteFile(signal, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p.own(signal)
	p.Standby.configure(map[string]string{
		"primary_conninfo": pgserver.Quote(fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", p.Primary.Port, standbyName)),
		// Promoted, it has no standby of its own: naming one would make
		// every commit wait for a server that never comes.
		"synchronous_standby_names": "''",
	})
	p.Standby.start()
	p.waitStreaming(mode)
	return p
}

// URL is a connection string to database on every server of the pair, in
// the order a deployment lists them: the first that accepts writes is
// used (target_session_attrs=read-write), so a promoted standby is found
// without changing the configuration.
func (p *Pair) URL(database string) string {
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Path: "/" + database,
		Host: fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", p.Primary.Port, p.Standby.Port)}
	u.RawQuery = url.Values{"sslmode": {"disable"}, "target_session_attrs": {"read-write"}, "connect_timeout": {"2"}}.Encode()
	return u.String()
}

// URL connects to database on this server alone.
func (s *Server) URL(database string) string {
	return pgserver.URL(s.Port, database) + "&connect_timeout=2"
}

// Crash stops the server at once, as a power cut or kill -9 would: no
// checkpoint, no goodbye to its clients or its standby.
func (s *Server) Crash() {
	s.pair.t.Helper()
	s.pair.must(s.pair.bin.Stop(s.Dir, "immediate"))
}

// Promote makes the standby a primary and waits until it accepts writes.
func (s *Server) Promote() {
	s.pair.t.Helper()
	s.pair.must(s.pair.bin.Run(nil, "pg_ctl", "-D", s.Dir, "-w", "-t", "60", "promote"))
}

// Stop shuts the server down cleanly. A standby stopped while an Async
// primary commits falls behind by everything committed until the primary
// is lost: started again after that, it has nothing to receive it from.
func (s *Server) Stop() {
	s.pair.t.Helper()
	s.pair.must(s.pair.bin.Stop(s.Dir, "fast"))
}

// Start starts a stopped server again.
func (s *Server) Start() { s.pair.t.Helper(); s.start() }

// WaitReplayed waits until the standby has replayed everything the
// primary has written so far.
func (p *Pair) WaitReplayed() {
	p.t.Helper()
	p.onPrimary(func(ctx context.Context, conn *pgx.Conn) (bool, error) {
		var caughtUp bool
		err := conn.QueryRow(ctx, `SELECT coalesce(bool_and(replay_lsn >= pg_current_wal_lsn()), false)
			FROM pg_stat_replication WHERE application_name = $1`, standbyName).Scan(&caughtUp)
		return caughtUp, err
	}, "the standby has not replayed the primary's WAL")
}

// onPrimary asks done on the primary every 50 ms until it says true, for
// up to 30 s, or fails the test with what.
func (p *Pair) onPrimary(done func(context.Context, *pgx.Conn) (bool, error), what string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.Primary.URL("postgres"))
	if err != nil {
		p.t.Fatalf("connect to the primary: %v", err)
	}
	defer conn.Close(ctx)
	for {
		ok, err := done(ctx, conn)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			p.t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			p.t.Fatalf("%s after 30 s\n%s", what, p.Standby.log())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitStreaming waits until the primary sees its standby streaming, and
// under Sync as its synchronous standby.
func (p *Pair) waitStreaming(mode Replication) {
	p.t.Helper()
	want := "async"
	if mode == Sync {
		want = "sync"
	}
	p.onPrimary(func(ctx context.Context, conn *pgx.Conn) (bool, error) {
		var state string
		err := conn.QueryRow(ctx, `SELECT sync_state FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'`, standbyName).Scan(&state)
		return state == want, err
	}, "the standby is not streaming as "+want)
}

// configure appends settings to the server's postgresql.conf: loopback
// only, its own port and socket directory, small, and fsync off (the tests
// crash processes, never the machine, so the page cache survives).
func (s *Server) configure(extra map[string]string) {
	s.pair.t.Helper()
	s.pair.must(pgserver.Configure(s.Dir, "guardian replica test", pgserver.Loopback(s.Port, s.Dir), map[string]string{
		"max_connections":  "100",
		"shared_buffers":   "'32MB'",
		"fsync":            "off",
		"full_page_writes": "off",
	}, extra))
}

func (s *Server) start() {
	s.pair.t.Helper()
	s.pair.must(s.pair.bin.Start(nil, s.Dir, s.logFile()))
}

func (s *Server) logFile() string { return s.Dir + ".log" }

func (s *Server) log() string {
	b, _ := os.ReadFile(s.logFile())
	return string(b)
}

// own gives a path made here to the user the servers run as.
func (p *Pair) own(path string) {
	p.t.Helper()
	if err := p.bin.Own(path); err != nil {
		p.t.Fatal(err)
	}
}

// must fails the test on err, a server tool's, with the servers' logs.
func (p *Pair) must(err error) {
	p.t.Helper()
	if err != nil {
		logs := ""
		for _, s := range []*Server{p.Primary, p.Standby} {
			if s != nil {
				logs += "\n" + s.Name + " log:\n" + s.log()
			}
		}
		p.t.Fatalf("%v%s", err, logs)
	}
}
