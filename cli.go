// Command guardian turns payment providers' webhooks into fulfilment that
// happens exactly once. Run `guardian help` for its commands.
//
// This package is the composition root, the one place that imports every
// layer: cli.go and its neighbours are the command (serve, migrate,
// backfill, config, and the operators and epoch commands, which talk to
// the database; the client commands are web/client's, handed their
// settings parsed); settings.go registers the server's own settings and
// config.go reads them, with every registered provider's and backfill's,
// into a Config; wiring.go builds the pool, migrations, connector, filter,
// River client and HTTP server from it and starts and stops them in order.
// Nothing in app/ imports web/ or jobs/: they are the edges, wired here.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/guardian-pay/guardian/app/backfill"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/loadgen"
	"github.com/guardian-pay/guardian/app/metrics"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/settings"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/goose"
	"github.com/guardian-pay/guardian/web/client"
)

// Exit codes scripts can rely on: the operator commands' (client.ExitOK
// and on).
const (
	ExitOK       = client.ExitOK
	ExitFailure  = client.ExitFailure
	ExitUsage    = client.ExitUsage
	ExitNotFound = client.ExitNotFound
)

const usage = `guardian: exactly-once fulfilment for payment webhooks

Usage:
  guardian serve [--no-migrate] [--shutdown-timeout D]
                                    serve webhooks and dispatch fulfilments
  guardian config check|list        name every problem with the configuration (exit 2 if any), or list every setting
  guardian version                  the build's version and revision
  guardian migrate up|down|status   manage the database schema
  guardian backfill stripe|paddle|paypal [--since 72h]
                                       fetch a provider's events never delivered (needs its API credentials)
  guardian epoch show|rotate        the database's epoch, which scopes Redis marks (rotate after a restore or failover)
  guardian operators add|list|revoke|signout  named operator credentials (see guardian operators)
  guardian connector test [--json]    check the receiver against the contract (docs/receivers.md)
  guardian actions list [--json]    the actions purchases pay for and the routes that decide them
  guardian actions apply NAME ...   give an action to past purchases the routes now say pay for it
  guardian subscriptions link ...   link subscriptions started before links were recorded, from their stored events
  guardian demo [--url URL]         send signed sample deliveries to a dev server
  guardian bench [flags]            load a running Guardian with signed deliveries (see --help)
  guardian help                     show this

Configuration comes from the environment; see README.md.

` + client.Usage

// Main runs the command in args and returns the process exit code.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ExitUsage
	}
	cmd, rest := args[0], args[1:]
	if text, ok := commandUsage[cmd]; ok && len(rest) > 0 && isHelp(rest[0]) {
		// Help comes before any configuration is read.
		fmt.Fprint(stdout, text)
		return ExitOK
	}
	switch cmd {
	case "version":
		fmt.Fprintln(stdout, metrics.Version())
		return ExitOK
	case "config":
		return runConfig(rest, getenv, stdout, stderr)
	case "serve":
		return runServe(ctx, rest, getenv, stderr)
	case "migrate":
		return runMigrate(ctx, rest, getenv, stdout, stderr)
	case "epoch":
		return runEpoch(ctx, rest, getenv, stdout, stderr)
	case "operators":
		return runOperators(ctx, rest, getenv, stdout, stderr)
	case "backfill":
		return runBackfill(ctx, rest, getenv, stdout, stderr)
	case "demo":
		env := settings.NewEnv(getenv)
		return client.Demo(ctx, rest, client.DemoConfig{Config: client.ReadConfig(env, first(adminTokens.Read(env), DevAdminToken)),
			StripeSecret: provider.SigningSecret(env, "stripe"), StandardSecret: provider.SigningSecret(env, "standard")}, stdout, stderr)
	case "bench":
		env := settings.NewEnv(getenv)
		return loadgen.Main(ctx, rest, loadgen.ReadTarget(env, client.ReadConfig(env, "").URL, provider.SigningSecret(env, "stripe")), stdout, stderr)
	case "fulfilments", "reconcile", "events":
		env := settings.NewEnv(getenv)
		return client.Run(ctx, cmd, rest, client.ReadConfig(env, first(adminTokens.Read(env), "")), stdout, stderr)
	case "connector":
		return runConnector(ctx, rest, getenv, stdout, stderr)
	case "actions":
		return runActions(ctx, rest, getenv, stdout, stderr)
	case "subscriptions":
		return runSubscriptions(ctx, rest, getenv, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return ExitOK
	default:
		fmt.Fprintf(stderr, "guardian: unknown command %q\n\n%s", cmd, usage)
		return ExitUsage
	}
}

// commandUsage is each command's help where its flags do not say it all.
var commandUsage = map[string]string{
	"migrate":       "usage: guardian migrate up|down|status\n  applies, rolls back (one) or lists migrations on DATABASE_URL\n",
	"epoch":         "usage: guardian epoch show|rotate\n  the database's epoch, which scopes Redis marks; rotate after a restore or failover (docs/operations.md)\n",
	"operators":     operatorsUsage,
	"backfill":      backfillUsage,
	"config":        "usage: guardian config check|list [--markdown]\n  check: reads the configuration from the environment and names every problem; exit 2 if any\n  list: every setting Guardian reads, its value here (a secret only as set or unset) and its default;\n  --markdown prints the README's configuration table instead\n",
	"fulfilments":   client.Usage,
	"reconcile":     client.Usage,
	"events":        client.Usage,
	"connector":     connectorUsage,
	"actions":       actionsUsage,
	"subscriptions": subscriptionsUsage,
}

// The command line's helpers are the client commands'.
var (
	isHelp    = client.IsHelp
	usageExit = client.UsageExit
	fail      = client.Fail
	table     = client.Table
)

// first is the first of list, or def when it is empty.
func first(list []string, def string) string {
	if len(list) == 0 {
		return def
	}
	return list[0]
}

// runConfig runs `guardian config check` and `guardian config list`.
func runConfig(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 2 && (args[0] == "check" || args[0] == "list") && isHelp(args[1]) {
		fmt.Fprint(stdout, commandUsage["config"])
		return ExitOK
	}
	switch {
	case len(args) == 1 && args[0] == "list":
		_ = settings.WriteList(stdout, getenv)
		return ExitOK
	case len(args) == 2 && args[0] == "list" && args[1] == "--markdown":
		_ = settings.WriteMarkdown(stdout)
		return ExitOK
	case len(args) != 1 || args[0] != "check":
		fmt.Fprint(stderr, commandUsage["config"])
		return ExitUsage
	}
	for _, w := range settings.Unknown(os.Environ()) {
		fmt.Fprintln(stderr, "guardian: warning: "+w)
	}
	cfg, err := ConfigFromEnv(getenv)
	for _, w := range cfg.Warnings {
		fmt.Fprintln(stderr, "guardian: warning: "+w)
	}
	if err != nil {
		fmt.Fprintf(stderr, "guardian: configuration refused:\n  %s\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return ExitUsage
	}
	fmt.Fprintln(stdout, "configuration ok")
	return ExitOK
}

// NewLogger returns the process logger: JSON for machines, text for a terminal.
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("GUARDIAN_LOG_LEVEL: want debug, info, warn or error, got %q", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return slog.New(slog.NewJSONHandler(w, opts)), nil
}

func runServe(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	noMigrate := fs.Bool("no-migrate", false, "do not apply pending migrations at start")
	shutdown := fs.Duration("shutdown-timeout", 0, "how long a stop waits for in-flight work (default: connector timeout + 15s)")
	if err := fs.Parse(args); err != nil {
		return usageExit(err)
	}
	a, logger, code := appFrom(ctx, getenv, stderr, func(cfg *Config) error {
		cfg.Migrate = cfg.Migrate && !*noMigrate
		return nil
	})
	if a == nil {
		return code
	}
	if err := a.Start(ctx); err != nil {
		logger.Error("cannot start", "error", err)
		_ = a.Stop(context.Background())
		return ExitFailure
	}
	<-ctx.Done()
	timeout := *shutdown
	if timeout == 0 {
		timeout = a.ConnectorTimeout() + fulfilment.RecordMargin
	}
	logger.Info("stopping", "drain_timeout", timeout)
	stopCtx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := a.Stop(stopCtx); err != nil {
		logger.Error("stopped with errors", "error", err)
		return ExitFailure
	}
	logger.Info("stopped")
	return ExitOK
}

// commandOnly adjusts a command's configuration: no workers, no API.
func commandOnly(cfg *Config) error {
	cfg.Workers, cfg.API = false, false
	return nil
}

// appFrom builds an App from the environment's configuration, after
// adjust. When it cannot, it says why on stderr and returns a nil App and
// the exit code: 2 for configuration, 1 for a start that failed.
func appFrom(ctx context.Context, getenv func(string) string, stderr io.Writer, adjust func(*Config) error) (*App, *slog.Logger, int) {
	cfg, err := ConfigFromEnv(getenv)
	if err == nil {
		err = adjust(&cfg)
	}
	if err != nil {
		fmt.Fprintf(stderr, "guardian: configuration refused:\n  %s\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return nil, nil, ExitUsage
	}
	logger, err := NewLogger(stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		fmt.Fprintf(stderr, "guardian: %v\n", err)
		return nil, nil, ExitUsage
	}
	for _, w := range settings.Unknown(os.Environ()) {
		logger.Warn(w)
	}
	for _, w := range cfg.Warnings {
		logger.Warn(w)
	}
	a, err := New(ctx, cfg, logger)
	if err != nil {
		logger.Error("cannot start", "error", err)
		return nil, nil, ExitFailure
	}
	return a, logger, ExitOK
}

// backfillUsage is `guardian backfill`'s usage.
const backfillUsage = `usage: guardian backfill stripe|paddle|paypal [--since 72h]
  fetches the provider's events never delivered, through the same intake as a webhook
  (stripe needs GUARDIAN_STRIPE_API_KEY; paddle GUARDIAN_PADDLE_API_KEY;
  paypal GUARDIAN_PAYPAL_CLIENT_ID and GUARDIAN_PAYPAL_CLIENT_SECRET)
`

// runBackfill runs one backfill of a provider through the same intake as a
// webhook (dispatch jobs it creates are worked by the serving processes).
func runBackfill(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if _, ok := backfill.Lookup(first(args, "")); !ok {
		fmt.Fprint(stderr, backfillUsage)
		return ExitUsage
	}
	name := args[0]
	fs := flag.NewFlagSet("backfill "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	since := fs.Duration("since", 0, "list events created this long ago and since (default: from the checkpoint, or 72h on a first run)")
	if err := fs.Parse(args[1:]); err != nil {
		return usageExit(err)
	}
	a, logger, code := appFrom(ctx, getenv, stderr, commandOnly)
	if a == nil {
		return code
	}
	defer func() { _ = a.Stop(context.Background()) }()
	var from time.Time
	if *since > 0 {
		from = time.Now().Add(-*since)
	}
	res, err := a.Backfill(ctx, name, from)
	if err != nil {
		logger.Error("backfill failed; the checkpoint did not move", "provider", name, "error", err)
		return ExitFailure
	}
	fmt.Fprintf(stdout, "listed %d %s events since %s: %d new, %d fulfilments created\n", res.Listed, name, res.From.UTC().Format(time.RFC3339), res.New, res.Fulfilments)
	return ExitOK
}

// runEpoch shows or rotates the database's epoch (docs/operations.md,
// "Restoring the database").
func runEpoch(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) != 1 || (args[0] != "show" && args[0] != "rotate") {
		fmt.Fprintln(stderr, "usage: guardian epoch show|rotate")
		return ExitUsage
	}
	pool, err := openDatabase(ctx, getenv)
	if err != nil {
		return fail(stderr, ExitFailure, err)
	}
	defer pool.Close()
	read := db.Epoch
	if args[0] == "rotate" {
		read = db.RotateEpoch
	}
	epoch, err := read(ctx, pool)
	if err != nil {
		return fail(stderr, ExitFailure, err)
	}
	fmt.Fprintln(stdout, epoch)
	return ExitOK
}

func runMigrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) != 1 || (args[0] != "up" && args[0] != "down" && args[0] != "status") {
		fmt.Fprintln(stderr, "usage: guardian migrate up|down|status")
		return ExitUsage
	}
	logger, _ := NewLogger(stderr, "text", "info")
	pool, err := openDatabase(ctx, getenv)
	if err != nil {
		return fail(stderr, ExitFailure, err)
	}
	defer pool.Close()
	switch args[0] {
	case "up":
		if err := Migrate(ctx, pool, logger); err != nil {
			return fail(stderr, ExitFailure, err)
		}
		return ExitOK
	}
	m, err := goose.NewMigrator(pool)
	if err != nil {
		return fail(stderr, ExitFailure, err)
	}
	defer m.Close()
	if args[0] == "down" {
		res, err := m.Down(ctx)
		if errors.Is(err, goose.ErrNoNextVersion) {
			fmt.Fprintln(stdout, "nothing to roll back")
			return ExitOK
		}
		if err != nil {
			return fail(stderr, ExitFailure, err)
		}
		fmt.Fprintf(stdout, "rolled back %s\n", res.Source.Path)
		return ExitOK
	}
	st, err := m.Status(ctx)
	if err != nil {
		return fail(stderr, ExitFailure, err)
	}
	tw := table(stdout)
	fmt.Fprintln(tw, "VERSION\tSTATE\tAPPLIED AT\tFILE")
	for _, s := range st {
		applied := ""
		if !s.AppliedAt.IsZero() {
			applied = s.AppliedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", s.Source.Version, s.State, applied, s.Source.Path)
	}
	_ = tw.Flush()
	return ExitOK
}

// openDatabase connects a command to the database the server uses:
// DATABASE_URL, through the pooler GUARDIAN_DB_POOLER names.
func openDatabase(ctx context.Context, getenv func(string) string) (*pgxpool.Pool, error) {
	env := settings.NewEnv(getenv)
	url, pooler := databaseURL.Read(env), db.Pooler(dbPooler.Read(env))
	if err := env.Err(); err != nil {
		return nil, err
	}
	return db.Connect(ctx, url, pooler)
}
