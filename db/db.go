package db

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

var (
	// ErrNotFound means the row asked for does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict means a conditional write matched no row: someone else
	// moved the row first. The caller logs, counts and moves on.
	ErrConflict = errors.New("row moved: expected state no longer holds")
)

// DBTX is what a statement runs on: a pool, a connection or a transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store runs Guardian's statements against one Postgres database.
type Store struct {
	pool *pgxpool.Pool
}

// New returns a Store over pool. The pool stays the caller's to close.
func New(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool}
}

// Pool returns the pool the store runs on.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// txAttempts bounds how often InTx runs a transaction Postgres aborted to
// break a deadlock or a serialization race.
const txAttempts = 3

// InTx runs fn in one transaction and commits if fn returns nil. Any error
// rolls the transaction back; nothing fn wrote is visible unless the commit
// succeeded.
//
// When Postgres aborts the transaction to break a deadlock or a
// serialization race (Retryable), nothing of it was committed, and fn runs
// again in a new transaction, up to three runs in all: a caller is never
// told that a change failed because it lost a race it can win a moment
// later. fn must therefore set what it reports afresh on every run.
//
// A run waits a few random milliseconds before it starts again: the
// winner of a deadlock is still waking up to take the lock the loser
// released, and a loser that ran again at once could take that lock
// first and deadlock with the same winner, run after run.
func (s *Store) InTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return retried(ctx, func() error { return pgx.BeginFunc(ctx, s.pool, fn) })
}

// retried runs a transaction, again while Postgres aborts it Retryable,
// up to txAttempts runs (InTx).
func retried(ctx context.Context, run func() error) error {
	for n := 1; ; n++ {
		err := run()
		if err == nil || n == txAttempts || !Retryable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(n) * (txBackoff + rand.N(txBackoff))):
		}
	}
}

// txBackoff is the least wait before a run again; each run waits up to
// twice it, times the runs so far.
const txBackoff = 10 * time.Millisecond

// Retryable reports whether err is Postgres aborting a transaction to
// break a deadlock (40P01) or a serialization race (40001): the
// transaction did nothing, and the same work may simply run again.
func Retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.DeadlockDetected || pgErr.Code == pgerrcode.SerializationFailure)
}

// translate turns pgx errors into the package's sentinels, leaving others
// wrapped as they are.
func translate(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", op, translate(err))
}

// prefixed qualifies each of a column list's names with prefix ("f."), for
// statements that join a table whose columns they list.
func prefixed(prefix, columns string) string {
	parts := strings.Split(columns, ", ")
	for i, c := range parts {
		parts[i] = prefix + c
	}
	return strings.Join(parts, ", ")
}
