package db

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultMaxConns is the pool size unless DATABASE_URL sets pool_max_conns.
const DefaultMaxConns = 25

// Pooler is what stands between Guardian and Postgres, as far as sessions
// go: nothing (or a pooler in session mode, which gives each client one
// server connection for its whole life), or a pooler in transaction mode.
type Pooler string

const (
	// NoPooler: each of Guardian's connections is one Postgres session.
	NoPooler Pooler = "none"
	// TransactionPooler: a pooler (PgBouncer's pool_mode = transaction)
	// lends a server connection for one transaction at a time, so nothing
	// that lives in a session survives from one transaction to the next:
	// not a named prepared statement, not a LISTEN.
	TransactionPooler Pooler = "transaction"
)

// configurePooler makes cfg safe behind pooler. Behind a transaction
// pooler each query must keep nothing in the session between round trips:
// pgx's exec mode (one round trip, an unnamed statement) unless the URL
// chose simple_protocol. The other modes cache named prepared statements
// (cache_statement, pgx's default) or describe in one round trip and
// execute in the next, which the pooler may send to two servers: a URL
// choosing one of them is refused.
func configurePooler(cfg *pgxpool.Config, rawURL string, pooler Pooler) error {
	switch pooler {
	case "", NoPooler:
		return nil
	case TransactionPooler:
	default:
		return fmt.Errorf("GUARDIAN_DB_POOLER: want none or transaction (a pooler such as PgBouncer in pool_mode = transaction), got %q", pooler)
	}
	if !strings.Contains(rawURL, "default_query_exec_mode") {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
		return nil
	}
	if mode := cfg.ConnConfig.DefaultQueryExecMode; mode != pgx.QueryExecModeExec && mode != pgx.QueryExecModeSimpleProtocol {
		// pgx names a mode with spaces; the URL, with underscores.
		spelt := strings.ReplaceAll(mode.String(), " ", "_")
		return fmt.Errorf("DATABASE_URL: default_query_exec_mode (%s) needs its session between round trips, which a transaction pooler (GUARDIAN_DB_POOLER=transaction) does not keep: use exec or simple_protocol, or leave it out", spelt)
	}
	return nil
}

// CheckPooler reports what Connect would refuse in rawURL behind pooler.
func CheckPooler(rawURL string, pooler Pooler) error {
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return errors.New("DATABASE_URL is not a valid Postgres URL")
	}
	return configurePooler(cfg, rawURL, pooler)
}

// Connect opens a pool on url, set up for the pooler in front of Postgres,
// and checks that Postgres answers. Connection attempts time out after 5
// seconds unless the URL says otherwise, so an unreachable database fails a
// request rather than hanging it.
func Connect(ctx context.Context, rawURL string, pooler Pooler) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, errors.New("DATABASE_URL is not a valid Postgres URL")
	}
	if err := configurePooler(cfg, rawURL, pooler); err != nil {
		return nil, err
	}
	if !strings.Contains(rawURL, "connect_timeout") {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	if !strings.Contains(rawURL, "pool_max_conns") {
		// pgxpool's default (the CPU count, at least 4) starves intake and
		// dispatch, which share the pool; see docs/deployment.md for sizing.
		cfg.MaxConns = DefaultMaxConns
	}
	cfg.PrepareConn = refuseReadOnly
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to %s: %w", Redact(rawURL), err)
	}
	return pool, nil
}

// ErrReadOnly means the connection is to a server that can only read: a
// standby, or a primary fenced read-only (a failover demoting it). Every
// write there fails with SQLSTATE 25006, so the connection is closed; the
// next one is dialled afresh, and a multi-host DATABASE_URL with
// target_session_attrs=read-write dials the new primary.
var ErrReadOnly = errors.New("the database server is read-only (a standby, or a demoted primary): connection closed; the next one goes to the primary")

// refuseReadOnly is the pool's check before it hands out a connection: one
// whose server reports itself in recovery (in_hot_standby) or read-only by
// default (default_transaction_read_only), as Postgres 14 and later report
// both to every session when they change, is destroyed, and its query
// fails with ErrReadOnly instead of hanging on to a server that can only
// answer 25006. (River's client, sharing the pool, would otherwise fail
// for ever on a connection to a demoted primary.) A retry takes a new
// connection.
func refuseReadOnly(_ context.Context, c *pgx.Conn) (bool, error) {
	p := c.PgConn()
	if p.ParameterStatus("in_hot_standby") == "on" || p.ParameterStatus("default_transaction_read_only") == "on" {
		return false, ErrReadOnly
	}
	return true, nil
}

// EnsureDatabase creates the database url names if it does not exist, by
// connecting to the server's "postgres" database. For development only.
func EnsureDatabase(ctx context.Context, rawURL string) error {
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		return errors.New("DATABASE_URL is not a valid Postgres URL")
	}
	name := cfg.Database
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		return conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
		return fmt.Errorf("connect to %s: %w", Redact(rawURL), err)
	}
	cfg.Database = "postgres"
	admin, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to create database %q: %w", name, err)
	}
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // created meanwhile
			return nil
		}
		return fmt.Errorf("create database %q: %w", name, err)
	}
	return nil
}

// Redact returns url without its password, for logs and errors.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparseable database URL)"
	}
	return u.Redacted()
}

// CommitsCanBeLost reports whether the server may lose a commit it has
// acknowledged, and why: with synchronous_commit off, a crash of Postgres
// alone loses its last commits, and Guardian has answered 2xx for the
// deliveries they held, which their providers will not send again.
func CommitsCanBeLost(ctx context.Context, q DBTX) (bool, string, error) {
	var setting string
	if err := q.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&setting); err != nil {
		return false, "", wrap("read synchronous_commit", err)
	}
	if setting == "off" {
		return true, "synchronous_commit is off: a Postgres crash can lose deliveries Guardian has acknowledged, which their providers will not send again; set it to on (docs/deployment.md)", nil
	}
	return false, "", nil
}

// StatisticsGoStale reports whether nothing refreshes the planner's
// statistics of the tables a payment writes, and why: with autovacuum off
// for the server or for one of them, each connection keeps the plans it
// made on the tables' first rows, its own statements' and the foreign
// keys' checks (a sequential scan for each check, read three times a
// payment as the table grows), until someone runs ANALYZE.
func StatisticsGoStale(ctx context.Context, q DBTX) (bool, string, error) {
	var server string
	var tables []string
	err := q.QueryRow(ctx, `
		SELECT current_setting('autovacuum'),
			coalesce(array_agg(c.relname::text ORDER BY c.relname) FILTER (WHERE c.reloptions @> '{autovacuum_enabled=false}'), '{}')
		FROM pg_class c
		WHERE c.relnamespace = current_schema()::regnamespace
			AND c.relname IN ('webhook_event', 'purchase', 'fulfilment_identity', 'fulfilment_move', 'fulfilment_transition', 'river_job')`).Scan(&server, &tables)
	if err != nil {
		return false, "", wrap("read autovacuum", err)
	}
	why := staleStatistics(server, tables)
	return why != "", why, nil
}

// InvalidIndex is an index of Guardian's schema that Postgres keeps on
// every write and reads nothing through, and the statement that repairs
// it.
type InvalidIndex struct {
	Name, Repair string
}

// InvalidIndexes returns the invalid indexes of Guardian's schema that no
// build in progress accounts for. A build CONCURRENTLY that was
// interrupted (the migrating process killed, its statement cancelled)
// leaves its index invalid: Postgres keeps it up to date on every write
// and reads nothing through it, so the lookups it serves scan their
// table. A migration that names it IF NOT EXISTS takes it for built.
// REINDEX INDEX CONCURRENTLY rebuilds it while writes go on. An
// interrupted REINDEX CONCURRENTLY leaves the copy it was building
// (named with _ccnew) or the old index it had not yet dropped (_ccold):
// those are dropped, not rebuilt (Postgres's REINDEX documentation).
//
// An index another session is building right now is invalid until the
// build ends, and is left out: Postgres reports each build in
// pg_stat_progress_create_index, by the index it makes (or, for a
// REINDEX, the index it rebuilds, beside which its _ccnew copy stands).
// A build by another role is reported without its index unless this role
// may read all statistics (pg_read_all_stats); its index is then named.
func InvalidIndexes(ctx context.Context, q DBTX) ([]InvalidIndex, error) {
	rows, err := q.Query(ctx, `
		SELECT c.relname::text,
			CASE WHEN r.copy THEN 'DROP INDEX CONCURRENTLY ' ELSE 'REINDEX INDEX CONCURRENTLY ' END || quote_ident(c.relname)
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
			CROSS JOIN LATERAL (SELECT c.relname ~ '_cc(new|old)[0-9]*$' AS copy) r -- a REINDEX CONCURRENTLY's own
		WHERE NOT i.indisvalid AND c.relnamespace = current_schema()::regnamespace
			AND NOT EXISTS (
				SELECT 1 FROM pg_stat_progress_create_index p
				WHERE p.index_relid = i.indexrelid
					OR (r.copy AND p.relid = i.indrelid AND p.command = 'REINDEX CONCURRENTLY'))
		ORDER BY 1`)
	if err != nil {
		return nil, wrap("read invalid indexes", err)
	}
	invalid, err := pgx.CollectRows(rows, pgx.RowToStructByPos[InvalidIndex])
	return invalid, wrap("read invalid indexes", err)
}

// staleStatistics says why the statistics go stale, given the server's
// autovacuum setting and the tables a payment writes that turn it off;
// "" when nothing stops autovacuum.
func staleStatistics(server string, tablesOff []string) string {
	const fix = "Guardian's connections keep plans made on the tables' first rows (a sequential scan for each foreign key's check as they grow); turn it on, or run ANALYZE once a new database holds a few thousand payments and regularly after (docs/deployment.md, \"Sizing\")"
	tables := strings.Join(tablesOff, ", ")
	switch {
	case server == "off" && tables != "":
		// Named too, since turning the server's on leaves these off.
		return "autovacuum is off, and by their own setting for " + tables + ": " + fix
	case server == "off":
		return "autovacuum is off: " + fix
	case tables != "":
		return "autovacuum is off for " + tables + ": " + fix
	}
	return ""
}
