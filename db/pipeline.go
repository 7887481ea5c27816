package db

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// InPipelinedTx is InTx with two round trips fewer: the transaction's
// BEGIN goes out with its first statement, and its COMMIT with the
// statement fn names last (CommitWithNext), each pair in one round trip (a
// pgx batch: one write, one Sync). An intake batch is then two round trips
// where it was four. Retries and rollback are InTx's.
//
// Postgres runs the messages of a pipeline in order and skips the rest of
// it once one fails, so a COMMIT sent after a statement that fails is
// never run: the transaction is left aborted and rolled back. A
// statement sent with its COMMIT commits with it, so fn must do nothing
// after it that could fail the transaction: it reads that statement's
// rows and returns.
func (s *Store) InPipelinedTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return retried(ctx, func() error {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		// A connection released inside a transaction (a failed ROLLBACK,
		// a cancelled read) is closed by the pool, never reused.
		defer conn.Release()
		tx := &pipedTx{conn: conn.Conn()}
		if err := fn(tx); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		return tx.Commit(ctx)
	})
}

// CommitWithNext makes tx's next statement its last: its COMMIT goes out
// with it, in its round trip (InPipelinedTx). On any other transaction it
// does nothing, and the caller's Commit commits as always.
func CommitWithNext(tx pgx.Tx) {
	if p, ok := tx.(*pipedTx); ok {
		p.commitNext = true
	}
}

// afterCommit has sql run once tx has committed, as a transaction of its
// own: on a transaction of InPipelinedTx, right after its COMMIT, in the
// same round trip (or the round trip after an explicit Commit); on any
// other, never. What it does cannot undo the commit, and its error is
// not the transaction's: done, when set, is told how it went (nil: it
// ran), and is not called when it never ran (no commit, or tx is not
// pipelined).
func afterCommit(tx pgx.Tx, done func(error), sql string, args ...any) {
	if p, ok := tx.(*pipedTx); ok {
		p.after = &afterStatement{QueuedQuery: pgx.QueuedQuery{SQL: sql, Arguments: args}, done: done}
	}
}

// afterStatement is a statement run after a transaction's COMMIT
// (afterCommit), and who is told of its result.
type afterStatement struct {
	pgx.QueuedQuery
	done func(error)
}

// ran tells a's caller how it went.
func (a *afterStatement) ran(err error) {
	if a.done != nil {
		a.done(err)
	}
}

// pipedTx is a transaction on conn whose BEGIN goes out with its first
// statement (pgx's Batch.BeginTx; tx is pgx's transaction from then on),
// and whose COMMIT goes with a statement when commitNext is set, followed
// by after when it is set (afterCommit).
type pipedTx struct {
	conn       *pgx.Conn
	tx         pgx.Tx
	commitNext bool
	after      *afterStatement
	// ended is set once a statement's COMMIT committed, or Commit or
	// Rollback ran.
	ended bool
}

var errTxEnded = errors.New("transaction already committed or rolled back")

// send sends one statement in a batch, with BEGIN before it if none was
// sent yet and COMMIT after it if it is the last. The caller reads the
// statement's result from the batch, then ends it with finish.
func (t *pipedTx) send(ctx context.Context, sql string, args []any) (pgx.BatchResults, bool, error) {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	return t.sendAll(ctx, b)
}

// sendAll sends b's statements in one batch, with BEGIN before them if
// none was sent yet and COMMIT after them if the last is among them. The
// caller reads each statement's result from the batch, then ends it with
// finish.
func (t *pipedTx) sendAll(ctx context.Context, b *pgx.Batch) (pgx.BatchResults, bool, error) {
	if t.ended {
		return nil, false, errTxEnded
	}
	piped := &pgx.Batch{}
	first, commit := t.tx == nil, t.commitNext
	if first {
		piped.BeginTx(pgx.TxOptions{})
	}
	piped.QueuedQueries = append(piped.QueuedQueries, b.QueuedQueries...)
	if commit {
		piped.Queue("COMMIT")
		if t.after != nil {
			piped.Queue(t.after.SQL, t.after.Arguments...)
		}
	}
	t.commitNext = false
	br := t.conn.SendBatch(ctx, piped)
	if first {
		t.tx = br.Tx()
		if _, err := br.Exec(); err != nil {
			return nil, false, errors.Join(err, br.Close())
		}
	}
	return br, commit, nil
}

// finish reads the COMMIT sent with a statement, if one was, and closes
// its batch. A COMMIT Postgres answers ROLLBACK did not commit.
func (t *pipedTx) finish(br pgx.BatchResults, commit bool) error {
	var err, aerr error
	if commit {
		var tag pgconn.CommandTag
		if tag, err = br.Exec(); err == nil && tag.String() == "ROLLBACK" {
			err = pgx.ErrTxCommitRollback
		}
		if t.after != nil {
			_, aerr = br.Exec() // after's: it cannot undo the commit
		}
	}
	// A batch's Close returns the first error any of its statements met:
	// after's is not the transaction's.
	if cerr := br.Close(); err == nil && (aerr == nil || !errors.Is(cerr, aerr)) {
		err = cerr
	}
	if commit && err == nil {
		t.ended = true
		if t.after != nil {
			t.after.ran(aerr)
		}
	}
	return err
}

// piped says whether a statement goes out in a batch of its own making:
// the first (with BEGIN) or the last (with COMMIT). Any other is pgx's
// transaction's.
func (t *pipedTx) piped() bool { return t.tx == nil || t.commitNext || t.ended }

// Exec runs one statement (pgx.Tx).
func (t *pipedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if !t.piped() {
		return t.tx.Exec(ctx, sql, args...)
	}
	br, commit, err := t.send(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if ferr := t.finish(br, commit); err == nil {
		err = ferr
	}
	return tag, err
}

// Query runs one statement and returns its rows (pgx.Tx). With the
// statement's BEGIN or COMMIT in its batch, the rows end the batch when
// they are read to the end or closed, and their Err says whether the
// COMMIT failed.
func (t *pipedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if !t.piped() {
		return t.tx.Query(ctx, sql, args...)
	}
	br, commit, err := t.send(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, errors.Join(err, t.finish(br, commit))
	}
	return &batchRows{Rows: rows, finish: func() error { return t.finish(br, commit) }}, nil
}

// QueryRow runs one statement and returns its first row (pgx.Tx).
func (t *pipedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := t.Query(ctx, sql, args...)
	return &firstRow{rows: rows, err: err}
}

// Commit commits the transaction, unless a statement's COMMIT already did
// or nothing was sent: a transaction of no statements has nothing to end.
func (t *pipedTx) Commit(ctx context.Context) error {
	open := !t.ended && t.tx != nil
	err := t.end(ctx, pgx.Tx.Commit)
	if open && err == nil && t.after != nil {
		_, aerr := t.conn.Exec(ctx, t.after.SQL, t.after.Arguments...) // cannot undo the commit
		t.after.ran(aerr)
	}
	return err
}

// Rollback rolls the transaction back, if it is still open.
func (t *pipedTx) Rollback(ctx context.Context) error { return t.end(ctx, pgx.Tx.Rollback) }

// end ends pgx's transaction with how, if one was begun and is open.
func (t *pipedTx) end(ctx context.Context, how func(pgx.Tx, context.Context) error) error {
	open := !t.ended && t.tx != nil
	t.ended = true
	if !open {
		return nil
	}
	return how(t.tx, ctx)
}

// begun is pgx's transaction, begun alone if no statement began it: for
// what cannot carry BEGIN in its round trip.
func (t *pipedTx) begun(ctx context.Context) (pgx.Tx, error) {
	if t.ended {
		return nil, errTxEnded
	}
	if t.tx == nil {
		tx, err := t.conn.Begin(ctx)
		if err != nil {
			return nil, err
		}
		t.tx = tx
	}
	return t.tx, nil
}

// Begin starts a nested transaction, a savepoint (pgx.Tx).
func (t *pipedTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.begun(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Begin(ctx)
}

// CopyFrom copies rows in the transaction (pgx.Tx).
func (t *pipedTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	tx, err := t.begun(ctx)
	if err != nil {
		return 0, err
	}
	return tx.CopyFrom(ctx, table, columns, src)
}

// SendBatch sends a batch in the transaction (pgx.Tx), in one round trip
// with the transaction's BEGIN if none was sent yet, and with its COMMIT
// if CommitWithNext named it last: the caller reads each statement's
// result in order, then closes the results, which reads the COMMIT.
func (t *pipedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if !t.piped() {
		return t.tx.SendBatch(ctx, b)
	}
	br, commit, err := t.sendAll(ctx, b)
	if err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return &pipedBatch{BatchResults: br, finish: func() error { return t.finish(br, commit) }}
}

// pipedBatch is a batch's results whose Close reads the COMMIT sent after
// its statements, if one was.
type pipedBatch struct {
	pgx.BatchResults
	finish func() error
	closed bool
	err    error
}

func (b *pipedBatch) Close() error {
	if !b.closed {
		b.closed = true
		b.err = b.finish()
	}
	return b.err
}

// LargeObjects are pgx's transaction's; they need it begun, which only a
// statement or Begin does.
func (t *pipedTx) LargeObjects() pgx.LargeObjects {
	if t.tx == nil {
		panic("db: large objects before a pipelined transaction's first statement")
	}
	return t.tx.LargeObjects()
}

// Prepare prepares a statement on the transaction's connection (pgx.Tx).
func (t *pipedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return t.conn.Prepare(ctx, name, sql)
}

// Conn is the transaction's connection (pgx.Tx).
func (t *pipedTx) Conn() *pgx.Conn { return t.conn }

// batchRows are a statement's rows read from its batch: once read or
// closed, the batch is finished (its COMMIT read, if it had one).
type batchRows struct {
	pgx.Rows
	finish func() error
	closed bool
	err    error
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.err = r.finish()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// firstRow is QueryRow's answer over Query's rows.
type firstRow struct {
	rows pgx.Rows
	err  error
}

func (r *firstRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}
