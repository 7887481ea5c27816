package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"
	"riverqueue.com/riverui"

	"github.com/guardian-pay/guardian/app/actions"
	"github.com/guardian-pay/guardian/app/backfill"
	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/filter"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/lock"
	"github.com/guardian-pay/guardian/app/metrics"
	"github.com/guardian-pay/guardian/app/operators"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/tokens"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/goose"
	"github.com/guardian-pay/guardian/jobs"
	"github.com/guardian-pay/guardian/web"
)

// App is a running Guardian: HTTP intake and River dispatch over one pool.
type App struct {
	cfg    Config
	logger *slog.Logger
	pool   *pgxpool.Pool
	redis  *redis.Client
	// tokenRedis is the token store's client, when tokens live in Redis.
	tokenRedis *redis.Client
	jobs       *jobs.Client
	web        *web.Server
	// service is the fulfilment domain, for the commands that act through
	// it (guardian actions apply).
	service *fulfilment.Service
	// backfills holds a backfill for each provider whose API credentials
	// are configured, by provider name.
	backfills map[string]*backfill.Backfill

	riverUI     *riverui.Handler
	stopRiverUI context.CancelFunc

	stopTracing func(context.Context) error
	metrics     *metrics.Metrics
	registry    *prometheus.Registry
	// ops is the operations listener: /metrics and, with Pprof, pprof;
	// nil when GUARDIAN_METRICS_ADDR is off.
	ops *web.Ops
	// migrator answers /readyz's "migrations current?" without re-reading
	// the embedded migrations on every probe.
	migrator *goose.Migrator
}

// New builds an App from cfg, migrating the database first unless
// cfg.Migrate is false. Nothing is served until Start.
func New(ctx context.Context, cfg Config, logger *slog.Logger) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Dev {
		logger.Warn("DEVELOPMENT PROFILE: public development secrets and the logging connector are in use; never point a real provider or real money at this server")
		if err := db.EnsureDatabase(ctx, cfg.DatabaseURL); err != nil {
			return nil, err
		}
	}
	pool, err := db.Connect(ctx, cfg.DatabaseURL, cfg.DBPooler)
	if err != nil {
		return nil, err
	}
	a := &App{cfg: cfg, logger: logger, pool: pool}
	if err := a.build(ctx); err != nil {
		a.close()
		return nil, err
	}
	return a, nil
}

// build makes every part from the configuration, in the order a delivery
// and a dispatch need them: the schema, the providers that verify, the
// connector that acts, the optional filter, the domain with its metrics and
// enqueuer, the backfill, River's workers, and the HTTP server in front.
func (a *App) build(ctx context.Context) error {
	if err := a.buildSchema(ctx); err != nil {
		return err
	}
	providers := a.cfg.Providers
	conn, looker, err := a.buildConnector()
	if err != nil {
		return err
	}
	performers, err := a.buildPerformers()
	if err != nil {
		return err
	}
	dupFilter, err := a.buildFilter(ctx)
	if err != nil {
		return err
	}
	tracer, stopTracing, err := tracing(ctx, a.cfg)
	if err != nil {
		return err
	}
	a.stopTracing = stopTracing
	store := db.New(a.pool)
	// One reader of the table's counts for the gauges, the overview and
	// /api/v1/stats: one count everywhere.
	stats := db.NewStatsReader(a.pool)
	if performers == nil {
		performers = map[string]fulfilment.Performer{actions.Fulfil: {Connector: conn, Looker: looker, Timeout: a.cfg.ConnectorTimeout}}
	}
	service, enqueuer, err := a.buildDomain(store, stats, fulfilment.Config{Actions: a.cfg.ActionSet(), Performers: performers}, dupFilter, providers)
	if err != nil {
		return err
	}
	a.service = service
	if err := a.buildBackfills(service, store); err != nil {
		return err
	}
	riverClient, err := a.buildJobs(service, store, tracer, enqueuer)
	if err != nil {
		return err
	}
	return a.buildWeb(ctx, webParts{
		providers: providers, service: service, store: store, stats: stats,
		tracer: tracer, river: riverClient,
	})
}

// buildSchema opens the migrator and, unless told not to, migrates; it
// says when the server's settings can lose a commit it acknowledged, and
// when nothing keeps the planner's statistics.
func (a *App) buildSchema(ctx context.Context) error {
	var err error
	if a.migrator, err = goose.NewMigrator(a.pool); err != nil {
		return err
	}
	if a.cfg.Migrate {
		if err := migrateUp(ctx, a.migrator, a.logger); err != nil {
			return err
		}
	}
	lossy, why, err := db.CommitsCanBeLost(ctx, a.pool)
	if err != nil {
		return err
	}
	if lossy {
		a.logger.Error("database setting can lose acknowledged deliveries", "problem", why)
	}
	stale, why, err := db.StatisticsGoStale(ctx, a.pool)
	if err != nil {
		return err
	}
	if stale {
		a.logger.Warn("database setting leaves the planner's statistics stale", "problem", why)
	}
	invalid, err := db.InvalidIndexes(ctx, a.pool)
	if err != nil {
		return err
	}
	for _, ix := range invalid {
		a.logger.Warn("an index is invalid: its build was interrupted, so Postgres keeps it on every write and reads nothing through it",
			"index", ix.Name, "repair", ix.Repair)
	}
	return nil
}

// buildConnector makes the connector that acts, and its lookup when the
// receiver serves one; without a URL (the development profile), a
// connector that only logs. With an actions file there is none: each
// action has its own (buildPerformers).
func (a *App) buildConnector() (connector.Connector, connector.Looker, error) {
	cfg := a.cfg
	if cfg.Actions != nil {
		return nil, nil, nil
	}
	if cfg.ConnectorURL == "" {
		return connector.Log{Logger: a.logger}, nil, nil
	}
	h, err := connector.NewHTTP(connector.HTTPConfig{URL: cfg.ConnectorURL, Secret: cfg.ConnectorSecret, Timeout: cfg.ConnectorTimeout, LookupURL: cfg.ConnectorLookupURL, Calls: cfg.DispatchWorkers})
	if err != nil {
		return nil, nil, err
	}
	if h.CanLookup() {
		return h, h, nil
	}
	return h, nil, nil
}

// buildPerformers makes each action's connector and lookup from the
// actions file; nil without one.
func (a *App) buildPerformers() (map[string]fulfilment.Performer, error) {
	if a.cfg.Actions == nil {
		return nil, nil
	}
	out := map[string]fulfilment.Performer{}
	for _, act := range a.cfg.Actions.Actions {
		r := act.Receiver
		h, err := connector.NewHTTP(connector.HTTPConfig{URL: r.URL, Secret: r.Secrets[0], Rotating: r.Secrets[1:], Timeout: r.Timeout, LookupURL: r.LookupURL, Calls: a.cfg.DispatchWorkers})
		if err != nil {
			return nil, fmt.Errorf("action %s: %w", act.Name, err)
		}
		p := fulfilment.Performer{Connector: h, Timeout: r.Timeout}
		if h.CanLookup() {
			p.Looker = h
		}
		out[act.Name] = p
	}
	return out, nil
}

// buildFilter makes the optional Redis duplicate filter, scoped to the
// database's epoch; nil without REDIS_URL.
func (a *App) buildFilter(ctx context.Context) (filter.Filter, error) {
	if a.cfg.RedisURL == "" {
		return nil, nil
	}
	// go-redis logs pool failures on its own; route them through slog at
	// debug, since the filter already counts them and fails open.
	redis.SetLogger(redisLogger{a.logger})
	var err error
	if a.redis, err = filter.NewRedisClient(a.cfg.RedisURL); err != nil {
		return nil, err
	}
	epoch, err := db.Epoch(ctx, a.pool)
	if err != nil {
		return nil, fmt.Errorf("the duplicate filter needs the database's epoch: %w", err)
	}
	return filter.NewRedis(filter.RedisConfig{Client: a.redis, Prefix: a.cfg.RedisPrefix, Epoch: epoch})
}

// buildDomain makes the metrics, the insert-only enqueuer and the
// fulfilment domain that uses both; perform holds what performs actions
// (the connector and lookup, or the actions and their performers), the
// rest of the domain's configuration is the settings'.
func (a *App) buildDomain(store *db.Store, stats *db.StatsReader, perform fulfilment.Config, dupFilter filter.Filter, providers []provider.Provider) (*fulfilment.Service, *jobs.Enqueuer, error) {
	cfg := a.cfg
	a.registry = prometheus.NewRegistry()
	m, err := metrics.New(a.registry, stats, a.logger)
	if err != nil {
		return nil, nil, err
	}
	a.metrics = m
	for record, kept := range jobs.Retention(cfg.PayloadRetention, cfg.JobRetention) {
		m.Retention(record, kept)
	}
	enqueuer, err := jobs.NewEnqueuer(a.pool, a.logger)
	if err != nil {
		return nil, nil, err
	}
	mappers := map[string]provider.Mapper{}
	for _, p := range providers {
		if m, ok := p.(provider.Mapper); ok {
			mappers[p.Name()] = m
		}
	}
	service, err := fulfilment.New(fulfilment.Config{
		Store: store, Enqueuer: enqueuer, Logger: a.logger, Mappers: mappers, Reversals: cfg.RevokeOn,
		Actions: perform.Actions, Performers: perform.Performers, Mode: cfg.Mode, Items: cfg.ItemsSources(),
		Filter: dupFilter, Metrics: m, ConnectorTimeout: cfg.ConnectorTimeout, DispatchLease: cfg.DispatchLease,
		ReconcileGrace: cfg.ReconcileGrace, Batch: cfg.Batch, BatchWriters: cfg.BatchWriters,
	})
	return service, enqueuer, err
}

// buildBackfills makes the backfills the configuration turns on.
func (a *App) buildBackfills(service *fulfilment.Service, store *db.Store) error {
	a.backfills = map[string]*backfill.Backfill{}
	for name, make := range a.cfg.Backfills {
		b, err := make(backfill.Config{Service: service, Store: store, Logger: a.logger})
		if err != nil {
			return err
		}
		a.backfills[name] = b
	}
	return nil
}

// buildJobs makes River's working client when this process runs workers,
// and returns the River client River UI reads (the enqueuer's otherwise).
func (a *App) buildJobs(service *fulfilment.Service, store *db.Store, tracer trace.Tracer, enqueuer *jobs.Enqueuer) (*river.Client[pgx.Tx], error) {
	cfg := a.cfg
	if !cfg.Workers {
		return enqueuer.River(), nil
	}
	var err error
	if a.jobs, err = jobs.New(jobs.Config{
		Pool: a.pool, Logger: a.logger, Service: service, Locker: lock.Postgres{Store: store},
		Tokens: tokens.Postgres{Store: store}, Refusals: store, Tracer: tracer,
		Bodies: store, PayloadRetention: cfg.PayloadRetention, Tally: store, Metrics: a.metrics, JobRetention: cfg.JobRetention,
		SweepInterval: cfg.SweepInterval, DispatchWorkers: cfg.DispatchWorkers, ReconcileInterval: cfg.ReconcileInterval,
		Backfills: a.sortedBackfills(), BackfillInterval: cfg.BackfillInterval,
		Pooler: cfg.DBPooler,
	}); err != nil {
		return nil, err
	}
	// River UI and river_leader name processes by this id.
	a.logger.Info("workers on", "river_client_id", a.jobs.River().ID())
	return a.jobs.River(), nil
}

// webParts is what the HTTP server is built from.
type webParts struct {
	providers []provider.Provider
	service   *fulfilment.Service
	store     *db.Store
	stats     *db.StatsReader
	tracer    trace.Tracer
	river     *river.Client[pgx.Tx]
}

// buildWeb makes the HTTP server: intake, and with the API on, the
// operators' credentials, single-use tokens and River UI.
func (a *App) buildWeb(ctx context.Context, p webParts) error {
	cfg := a.cfg
	webCfg := web.Config{
		Addr: cfg.Addr, Providers: p.providers, Service: p.service,
		Logger: a.logger, MaxBodyBytes: cfg.MaxBodyBytes, Ready: a.ready, ReadyDetail: a.readyDetail, SessionTTL: cfg.SessionTTL,
		Metrics: a.metrics, Stats: p.stats, Tracer: p.tracer, PublicURL: cfg.PublicURL, TrustedProxies: cfg.TrustedProxies, Store: p.store,
	}
	tokenStore, err := a.buildTokenStore(ctx, p.store)
	if err != nil {
		return err
	}
	webCfg.Tokens = tokens.New(tokenStore, nil)
	if cfg.API {
		ops := operators.New(p.store, cfg.AdminTokens)
		if webCfg.SessionKey, err = ops.SessionKey(ctx); err != nil {
			return err
		}
		webCfg.Operators = ops
		if creds, err := ops.List(ctx); err == nil && len(cfg.AdminTokens) == 0 && !anyActive(creds) {
			a.logger.Warn("no operator can sign in: add one with `guardian operators add NAME`")
		}
		if a.riverUI, err = riverui.NewHandler(&riverui.HandlerOpts{
			Endpoints: riverui.NewEndpoints(p.river, nil),
			Logger:    a.logger.With("component", "riverui"),
			Prefix:    "/riverui",
		}); err != nil {
			return fmt.Errorf("river ui: %w", err)
		}
		webCfg.RiverUI = a.riverUI
	}
	a.web, err = web.New(webCfg)
	return err
}

// buildTokenStore makes the single-use tokens' store: Postgres, or Redis
// with a client of its own (token redeems wait for their answer, unlike
// the filter's fail-fast calls).
func (a *App) buildTokenStore(ctx context.Context, store *db.Store) (tokens.Store, error) {
	if a.cfg.TokenStore != "redis" {
		return tokens.Postgres{Store: store}, nil
	}
	opts, err := redis.ParseURL(a.cfg.RedisURL)
	if err != nil {
		return nil, errors.New("REDIS_URL is not a redis:// URL")
	}
	a.tokenRedis = redis.NewClient(opts)
	return tokens.NewRedis(ctx, a.tokenRedis, store, a.cfg.RedisPrefix+"token:")
}

// ready reports whether Postgres answers and every migration is applied.
func (a *App) ready(ctx context.Context) error {
	if err := a.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	current, err := a.migrator.Current(ctx)
	if err != nil {
		return err
	}
	if !current {
		return errors.New("migrations pending")
	}
	return nil
}

// Start starts dispatch, then intake. It returns once both run.
func (a *App) Start(ctx context.Context) error {
	if a.jobs != nil {
		if err := a.jobs.Start(ctx); err != nil {
			return fmt.Errorf("start river: %w", err)
		}
	}
	if a.riverUI != nil {
		uiCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		a.stopRiverUI = cancel
		if err := a.riverUI.Start(uiCtx); err != nil {
			a.stopJobs(ctx)
			return fmt.Errorf("start river ui: %w", err)
		}
	}
	// The operations listener binds first: a busy GUARDIAN_METRICS_ADDR
	// (9090 is Prometheus's own default) stops the start before anything
	// says "listening".
	if err := a.startOps(ctx); err != nil {
		a.stopJobs(ctx)
		return err
	}
	if err := a.web.Start(ctx); err != nil {
		a.stopOps(ctx)
		a.stopJobs(ctx)
		return err
	}
	if a.redis != nil {
		if msg := a.redisState(ctx); msg != "ok" {
			a.logger.Warn("redis "+msg, "redis_prefix", a.cfg.RedisPrefix)
		}
	}
	return nil
}

// stopOps stops the operations listener and joins the gauges' refresh.
func (a *App) stopOps(ctx context.Context) error {
	if a.ops == nil {
		return nil
	}
	return a.ops.Stop(ctx)
}

// redisState says whether the configured Redis answers: "ok", or what its
// absence means. Redis only saves work, so it never makes Guardian unready.
func (a *App) redisState(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := a.redis.Ping(ctx).Err(); err != nil {
		return "unreachable: the duplicate filter steps aside and every delivery goes to Postgres (results are the same; only work is lost)"
	}
	return "ok"
}

// readyDetail is what /readyz reports beside its status.
func (a *App) readyDetail(ctx context.Context) map[string]string {
	if a.redis == nil {
		return nil
	}
	return map[string]string{"redis": a.redisState(ctx)}
}

// startOps serves the operations listener, which runs the table gauges'
// refresh until it stops. The listener is never the public one
// (Config.Validate).
func (a *App) startOps(ctx context.Context) error {
	if a.cfg.MetricsAddr == "off" {
		return nil
	}
	var err error
	a.ops, err = web.NewOps(web.OpsConfig{
		Addr: a.cfg.MetricsAddr, Gatherer: a.registry, Pprof: a.cfg.Pprof, Logger: a.logger,
		Background: func(ctx context.Context) { a.metrics.RunTableRefresh(ctx, a.cfg.MetricsRefresh) },
	})
	if err != nil {
		return err
	}
	return a.ops.Start(ctx)
}

// anyActive reports whether any credential is unrevoked.
func anyActive(creds []db.Credential) bool {
	for _, c := range creds {
		if c.RevokedAt == nil {
			return true
		}
	}
	return false
}

// Backfill runs one backfill of the named provider from since (zero: from
// its checkpoint).
func (a *App) Backfill(ctx context.Context, name string, since time.Time) (backfill.Result, error) {
	b, ok := a.backfills[name]
	if !ok {
		d, _ := backfill.Lookup(name)
		return backfill.Result{}, fmt.Errorf("no %s backfill is configured: %s", name, d.Needs)
	}
	return b.Run(ctx, since)
}

// sortedBackfills lists the backfills by provider name.
func (a *App) sortedBackfills() []*backfill.Backfill {
	var out []*backfill.Backfill
	for _, name := range slices.Sorted(maps.Keys(a.backfills)) {
		out = append(out, a.backfills[name])
	}
	return out
}

// stopJobs stops River after a failed start, when it runs.
func (a *App) stopJobs(ctx context.Context) {
	if a.jobs != nil {
		_ = a.jobs.Stop(ctx)
	}
}

// ConnectorTimeout is the configured bound on one connector call: a stop
// waits this long, and the record margin, for calls in flight.
func (a *App) ConnectorTimeout() time.Duration { return a.cfg.ConnectorTimeout }

// Addr returns the HTTP listen address, once started.
func (a *App) Addr() string { return a.web.Addr() }

// Stop stops intake first (no new events), then dispatch (running calls
// finish until ctx ends), then closes connections. Safe before Start and
// more than once.
func (a *App) Stop(ctx context.Context) error {
	var errs []error
	if a.web != nil {
		errs = append(errs, a.web.Stop(ctx))
	}
	errs = append(errs, a.stopOps(ctx))
	if a.stopRiverUI != nil {
		a.stopRiverUI()
	}
	if a.jobs != nil {
		errs = append(errs, a.jobs.Stop(ctx))
	}
	if a.stopTracing != nil {
		errs = append(errs, a.stopTracing(ctx))
		a.stopTracing = nil
	}
	a.close()
	return errors.Join(errs...)
}

func (a *App) close() {
	if a.migrator != nil {
		_ = a.migrator.Close()
		a.migrator = nil
	}
	if a.redis != nil {
		_ = a.redis.Close()
		a.redis = nil
	}
	if a.tokenRedis != nil {
		_ = a.tokenRedis.Close()
		a.tokenRedis = nil
	}
	if a.pool != nil {
		a.pool.Close()
		a.pool = nil
	}
}

// Migrate applies pending migrations, logging each.
func Migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	m, err := goose.NewMigrator(pool)
	if err != nil {
		return err
	}
	defer m.Close()
	return migrateUp(ctx, m, logger)
}

func migrateUp(ctx context.Context, m *goose.Migrator, logger *slog.Logger) error {
	start := time.Now()
	res, err := m.Up(ctx)
	for _, r := range res {
		logger.Info("migration applied", "version", r.Source.Version, "file", r.Source.Path, "duration", r.Duration.String())
	}
	if err != nil {
		return err
	}
	logger.Info("migrations current", "applied", len(res), "took", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// redisLogger adapts go-redis's internal logging to slog.
type redisLogger struct{ logger *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.logger.DebugContext(ctx, "redis: "+fmt.Sprintf(format, v...))
}
