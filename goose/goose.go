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

// Migrator applies Guardian's migrations to one database.
type Migrator struct {
	db       *sql.DB
	provider *goosev3.Provider
}

// NewMigrator returns a Migrator that runs over pool. Close releases what it
// opened, never the pool itself.
func NewMigrator(pool *pgxpool.Pool) (*Migrator, error) {
	db := stdlib.OpenDBFromPool(pool)
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	provider, err := goosev3.NewProvider(goosev3.DialectPostgres, db, Migrations(), goosev3.WithSessionLocker(locker))
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	return &Migrator{db: db, provider: provider}, nil
}

// Close releases the migrator's database handle.
func (m *Migrator) Close() error { return m.db.Close() }

// Up applies every pending migration. Goose takes a Postgres advisory lock
// for the duration, so several processes starting at once migrate once.
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
