// Package goose holds Guardian's numbered SQL migrations, River's schema
// included, embedded in the binary and applied with pressly/goose.
package goose

//go:generate go run ./rivergen -dir migrations -first-goose 1 -from 1 -to 8

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	goosev3 "github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var embedded embed.FS

// Migrations returns the embedded migration files, rooted at their folder.
func Migrations() fs.FS {
	sub, err := fs.Sub(embedded, "migrations")
	if err != nil {
		panic(err) // the embed pattern above guarantees the folder
	}
	return sub
}

// How a migrator waits for another's lock: asking every lockRetry, for
// lockWait in all.
const (
	lockRetry = 500 * time.Millisecond
	lockWait  = 5 * time.Minute
)

// Migrator applies Guardian's migrations to one database.
type Migrator struct {
	db       *sql.DB
	provider *goosev3.Provider
}

// NewMigrator returns a Migrator that runs over pool. Close releases what it
// opened, never the pool itself.
func NewMigrator(pool *pgxpool.Pool) (*Migrator, error) {
	db := stdlib.OpenDBFromPool(pool)
	// The migration lock is a row (goose's table locker, table goose_lock),
	// not a session advisory lock: behind PgBouncer in transaction mode a
	// session lock and its unlock may run on different server sessions,
	// and two clients may share one, so two processes would both hold it
	// and apply one migration twice. A row holds wherever the statements
	// run. It is a lease, kept alive every 5 s and taken over 30 s after a
	// holder died; a waiter asks again every half second, for 5 minutes.
	locker, err := lock.NewPostgresTableLocker(lock.WithTableLockTimeout(lockRetry, uint64(lockWait/lockRetry)))
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	provider, err := goosev3.NewProvider(goosev3.DialectPostgres, db, Migrations(), goosev3.WithLocker(locker))
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	return &Migrator{db: db, provider: provider}, nil
}

// Close releases the migrator's database handle.
func (m *Migrator) Close() error { return m.db.Close() }

// Up applies every pending migration. It holds the migration lock (a row
// in goose_lock) for the duration, so several processes starting at once
// migrate once, directly or behind a transaction pooler.
func (m *Migrator) Up(ctx context.Context) ([]*goosev3.MigrationResult, error) {
	res, err := m.provider.Up(ctx)
	if err != nil {
		return res, fmt.Errorf("migrate up: %w", err)
	}
	return res, nil
}

// Down rolls back the most recent migration.
func (m *Migrator) Down(ctx context.Context) (*goosev3.MigrationResult, error) {
	res, err := m.provider.Down(ctx)
	if err != nil {
		return res, fmt.Errorf("migrate down: %w", err)
	}
	return res, nil
}

// Status reports every known migration and whether it is applied.
func (m *Migrator) Status(ctx context.Context) ([]*goosev3.MigrationStatus, error) {
	st, err := m.provider.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate status: %w", err)
	}
	return st, nil
}

// Current reports whether every embedded migration is applied, for /readyz.
func (m *Migrator) Current(ctx context.Context) (bool, error) {
	pending, err := m.provider.HasPending(ctx)
	if err != nil {
		return false, fmt.Errorf("check pending migrations: %w", err)
	}
	return !pending, nil
}

// ErrNoNextVersion is returned by Down when nothing is left to roll back.
var ErrNoNextVersion = goosev3.ErrNoNextVersion
