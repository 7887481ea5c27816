// Package dbtest gives tests a real, migrated Postgres database of their own.
//
// The server comes from TEST_DATABASE_URL when it is set, else from a
// throwaway container started with testcontainers-go where Docker runs. With
// neither, tests fail with a message that says how to get a database; they
// never skip.
//
// Each call to NewDB clones a fresh database from a template migrated once
// per migration set (guardian_test_tmpl_<hash>), so a test that commits, or
// runs concurrent transactions, owns everything it sees. The clone is
// dropped when the test ends; the template stays as a cache for the next run
// and is rebuilt (and its predecessors dropped) whenever the migrations change.
package dbtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/guardian-pay/guardian/goose"
)

// advisoryKey serialises template builds and clones across every test
// process on the server: CREATE DATABASE ... TEMPLATE fails if anyone else
// is connected to the template.
const advisoryKey = 0x6775617264 // "guard"

var (
	serverOnce sync.Once
	serverURL  string
	serverErr  error
)

// ServerURL returns the URL of the Postgres server tests use, starting a
// container if needed.
func ServerURL(t testing.TB) string {
	t.Helper()
	serverOnce.Do(func() {
		if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
			serverURL = u
			return
		}
		serverURL, serverErr = startContainer()
	})
	if serverErr != nil {
		t.Fatalf("no test database: %v", serverErr)
	}
	return serverURL
}

// DB is a fresh migrated database owned by one test.
type DB struct {
	// URL connects to the database; give it to a process under test.
	URL string
	// Name is the database's name.
	Name string
	// Pool is a pool on the database, closed when the test ends.
	Pool *pgxpool.Pool
}

// NewDB returns a fresh database with every migration applied.
func NewDB(t testing.TB) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	admin := ServerURL(t)
	name := "guardian_test_" + randomHex(6)
	// The template is made (if missing) and cloned under one hold of the
	// lock, so another run's clean-up cannot drop it in between.
	err := withAdvisoryLock(ctx, admin, func(conn *pgx.Conn) error {
		tmpl, err := ensureTemplate(ctx, admin, conn)
		if err != nil {
			return fmt.Errorf("prepare template database: %w", err)
		}
		_, err = conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", pgx.Identifier{name}.Sanitize(), pgx.Identifier{tmpl}.Sanitize()))
		return err
	})
	if err != nil {
		t.Fatalf("create test database: %v", err)
	}
	dbURL := withDatabase(admin, name)
	pool, err := newPool(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect test database: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("drop test database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", pgx.Identifier{name}.Sanitize())); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	return &DB{URL: dbURL, Name: name, Pool: pool}
}

// newPool opens the test's pool in pgx's exec mode, the strictest of its
// modes, which Guardian uses behind a transaction pooler
// (db.TransactionPooler): each argument is encoded by its Go type alone,
// without the server's word on the parameter's type, so a query that
// passes here passes in pgx's default mode too, and a query that needs the
// server's word (a named string type, bytes for a json column) fails here
// rather than behind a merchant's PgBouncer. URL, which processes under
// test are given, keeps pgx's default: the end-to-end suites run that.
func newPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	return pgxpool.NewWithConfig(ctx, cfg)
}

// Tx returns a transaction on a fresh database, rolled back when the test
// ends, for tests that need no commits.
func Tx(t testing.TB) pgx.Tx {
	t.Helper()
	db := NewDB(t)
	tx, err := db.Pool.Begin(context.Background())
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// ensureTemplate returns the template database of this tree's migrations,
// making it first if missing. The caller holds the advisory lock on conn.
func ensureTemplate(ctx context.Context, admin string, conn *pgx.Conn) (string, error) {
	sum, err := migrationsHash()
	if err != nil {
		return "", err
	}
	name := "guardian_test_tmpl_" + sum[:12]
	err = func() error {
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1 AND datistemplate)`, name).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return nil
		}
		// A build that died half-way leaves a database not yet marked as a
		// template: start it over.
		if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", pgx.Identifier{name}.Sanitize())); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s", pgx.Identifier{name}.Sanitize())); err != nil {
			return err
		}
		if err := migrate(ctx, withDatabase(admin, name)); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s WITH is_template true ALLOW_CONNECTIONS false", pgx.Identifier{name}.Sanitize())); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf("COMMENT ON DATABASE %s IS '%d'", pgx.Identifier{name}.Sanitize(), time.Now().Unix())); err != nil {
			return err
		}
		// Templates of other migration sets made over a day ago are dead
		// weight: drop them. Younger ones may belong to a run of another
		// tree on the same server (a branch, CI beside a developer). A
		// clone only happens under the advisory lock held here, so none is
		// in use.
		rows, err := conn.Query(ctx, `
			SELECT datname FROM pg_database d
			WHERE datname LIKE 'guardian\_test\_tmpl\_%' AND datname <> $1
			  AND coalesce(nullif(shobj_description(d.oid, 'pg_database'), ''), '0')::bigint < extract(epoch FROM now() - interval '1 day')`, name)
		if err != nil {
			return err
		}
		old, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, o := range old {
			_, _ = conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s WITH is_template false", pgx.Identifier{o}.Sanitize()))
			_, _ = conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s", pgx.Identifier{o}.Sanitize()))
		}
		return nil
	}()
	return name, err
}

func migrate(ctx context.Context, dbURL string) error {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := goose.NewMigrator(pool)
	if err != nil {
		return err
	}
	defer m.Close()
	_, err = m.Up(ctx)
	return err
}

func withAdvisoryLock(ctx context.Context, admin string, fn func(conn *pgx.Conn) error) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, advisoryKey); err != nil {
		return err
	}
	defer conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, advisoryKey) //nolint:errcheck // the session ends right after
	return fn(conn)
}

func migrationsHash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(goose.Migrations(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(goose.Migrations(), path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil)), err
}

func withDatabase(rawURL, name string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(fmt.Sprintf("TEST_DATABASE_URL is not a URL: %v", errors.Unwrap(err)))
	}
	u.Path = "/" + name
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
