package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/guardian-pay/guardian/app/actions"
	"github.com/guardian-pay/guardian/app/backfill"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/settings"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/web"
)

// Config is Guardian's configuration, read from the environment by
// ConfigFromEnv. The README's table documents every variable.
type Config struct {
	// DatabaseURL is the Postgres URL. Defaults to DefaultDatabaseURL.
	DatabaseURL string
	// DBPooler is what stands between Guardian and Postgres:
	// db.NoPooler, or db.TransactionPooler for PgBouncer in transaction
	// mode (queries keep nothing in the session; River polls instead of
	// listening).
	DBPooler db.Pooler
	// Addr is the HTTP listen address. Defaults to ":8080".
	Addr string
	// RedisURL enables the duplicate filter when set.
	RedisURL string
	// RedisPrefix starts the filter's keys. Defaults to "idem:".
	RedisPrefix string

	// Providers are the served providers, each built from its own
	// settings by its registration (provider.Register).
	Providers []provider.Provider
	// Backfills make the backfills whose settings are set, by provider
	// (backfill.Register).
	Backfills map[string]backfill.Maker
	// Warnings are what reading the settings found that an operator
	// should read at start, each logged once.
	Warnings []string
	// PayloadRetention is how long an event's body (the provider's payload,
	// personal data in it) is kept once nothing can need it; 0 keeps
	// bodies for good. Defaults to DefaultPayloadRetention.
	PayloadRetention time.Duration
	// JobRetention is how long River keeps completed and cancelled jobs.
	// Defaults to jobs.DefaultJobRetention.
	JobRetention time.Duration
	// RevokeOn is what a refund, a dispute or a subscription's end takes a
	// fulfilled payment back for (actions.Policy). Defaults to
	// actions.DefaultPolicy.
	RevokeOn actions.Policy
	// BackfillInterval is how often the leader backfills from each
	// provider with an API key.
	BackfillInterval time.Duration
	// MaxBodyBytes caps webhook bodies. Defaults to 1 MiB.
	MaxBodyBytes int64

	// ActionsFile is the actions file's path (GUARDIAN_ACTIONS_FILE), and
	// Actions what it declares; without a file Actions is nil and the
	// connector settings are the one action, actions.Fulfil.
	ActionsFile string
	Actions     *actions.Set
	// Mode is the money the deployment serves (GUARDIAN_MODE).
	Mode provider.Mode

	ConnectorURL    string
	ConnectorSecret string
	// ConnectorTimeout bounds one connector call. Defaults to 30 seconds.
	ConnectorTimeout time.Duration
	// DispatchLease is how long a fulfilment may stay dispatching before it
	// is parked. Defaults to 5 minutes; must exceed ConnectorTimeout.
	DispatchLease time.Duration
	// SweepInterval is how often the leader sweeps. Defaults to 30 seconds.
	SweepInterval time.Duration
	// DispatchWorkers is the number of concurrent dispatches per process.
	// Defaults to 50.
	DispatchWorkers int
	// Batch caps how many concurrent deliveries, claims or outcomes share
	// one statement (1: one each). Defaults to fulfilment.DefaultBatch.
	Batch int
	// BatchWriters is how many batches of each kind may run at once.
	BatchWriters int
	// Workers runs River workers (dispatch, sweep, reconciler) in this
	// process. Defaults to true; false makes an intake-only process, which
	// still enqueues dispatch jobs for the processes that work them.
	Workers bool

	// ConnectorLookupURL, when set, lets the reconciler ask the connector
	// whether a parked fulfilment's action was done; "{key}" is replaced by
	// the idempotency key.
	ConnectorLookupURL string
	// ReconcileInterval is how often the leader runs lookups. Defaults to 1 minute.
	ReconcileInterval time.Duration
	// ReconcileGrace is how long a row stays parked before its first
	// lookup. Defaults to 1 minute.
	ReconcileGrace time.Duration

	// API enables the operator API and River UI. Defaults to true.
	API bool
	// AdminTokens are environment operator tokens, for bootstrap and
	// automation; their decisions are audited as "admin-token". Named
	// operators (`guardian operators add`) are the usual credentials.
	AdminTokens []string
	// SessionTTL is how long a dashboard sign-in lasts. Defaults to 8 hours.
	SessionTTL time.Duration

	// TokenStore is where single-use tokens live: "postgres" (default) or
	// "redis" (needs RedisURL; redemptions are still recorded in Postgres).
	TokenStore string

	// Migrate applies pending migrations at start. Defaults to true.
	Migrate bool
	// Dev is the local development profile: clearly marked development
	// secrets and the logging connector fill what is missing, and the
	// database is created if absent. Never for real money.
	Dev bool
	// LogFormat is "json" or "text". Defaults to json, or text in Dev.
	LogFormat string
	// LogLevel is debug, info, warn or error. Defaults to info.
	LogLevel string
	// MetricsAddr is the operations listener: GET /metrics and, with Pprof,
	// /debug/pprof/. Defaults to DefaultMetricsAddr (loopback); "off"
	// serves neither. Never the public listener.
	MetricsAddr string
	// MetricsRefresh is how often the fulfilment-table gauges are read.
	MetricsRefresh time.Duration
	// Pprof serves net/http/pprof on MetricsAddr. Off by default, and
	// refused on a non-loopback MetricsAddr unless PprofRemote is set.
	Pprof       bool
	PprofRemote bool

	// PublicURL is where operators reach Guardian, as their browsers see
	// it. An https URL makes session cookies Secure with the __Host-
	// prefix and turns on HSTS; a set URL is the only origin a
	// state-changing dashboard request may come from.
	PublicURL string
	// TrustedProxies are the addresses (CIDRs or IPs) of proxies whose
	// X-Forwarded-For names the client. Empty: the TCP peer is the client,
	// and X-Forwarded-For is ignored.
	TrustedProxies []string
	// Tracing exports OpenTelemetry traces of intake and dispatch over OTLP
	// HTTP. On when OTEL_EXPORTER_OTLP_ENDPOINT or
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; off by default.
	Tracing bool
	// ServiceName names the traces' service. Defaults to "guardian"
	// (OTEL_SERVICE_NAME).
	ServiceName string
}

// DevAddr is the development profile's listen address: loopback only.
const DevAddr = "127.0.0.1" + web.DefaultAddr

// DefaultMetricsAddr is the operations listener's address: loopback only.
const DefaultMetricsAddr = "127.0.0.1:9090"

// DefaultDatabaseURL is the local Postgres of a development machine.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/guardian?sslmode=disable"

// DevAdminToken is the development profile's operator token, used only
// with GUARDIAN_DEV=1 (the profile's webhook secrets are in app/provider).
// It is public: a server started with it must never see real money.
const DevAdminToken = "dev-admin-token"

// ConfigFromEnv reads the configuration from getenv (os.Getenv in main):
// the settings registered here, then every registered provider's and
// backfill's. The error names every problem at once.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	env := settings.NewEnv(getenv)
	cfg := readConfig(env)
	if err := cfg.Validate(); err != nil {
		env.Fail(err)
	}
	common := provider.ReadCommon(env, cfg.Dev)
	cfg.Mode = common.Mode
	cfg.Providers = provider.Open(env, common)
	cfg.Backfills = backfill.Open(env, common, cfg.Providers)
	if err := cfg.loadActions(getenv, common.Mode); err != nil {
		env.Fail(err)
	}
	if w := cfg.itemsWarning(); w != "" {
		env.Warn(w)
	}
	cfg.Warnings = env.Warnings()
	return cfg, env.Err()
}

// readConfig reads the settings registered here (settings.go).
func readConfig(env *settings.Env) Config {
	cfg := Config{
		DatabaseURL: databaseURL.Read(env), DBPooler: db.Pooler(dbPooler.Read(env)),
		Addr: addr.Read(env), RedisURL: redisURL.Read(env), RedisPrefix: redisPrefix.Read(env),
		RevokeOn: revokeOn.Read(env), PayloadRetention: payloadRetention.Read(env), JobRetention: jobRetention.Read(env),
		BackfillInterval: backfill.Interval(env), MaxBodyBytes: maxBodyBytes.Read(env),
		ActionsFile:  actionsFile.Read(env),
		ConnectorURL: connectorURL.Read(env), ConnectorSecret: connectorSecret.Read(env), ConnectorTimeout: connectorTimeout.Read(env),
		DispatchLease: dispatchLease.Read(env), SweepInterval: sweepInterval.Read(env), DispatchWorkers: int(dispatchWorkers.Read(env)),
		Workers: workers.Read(env), Batch: int(batch.Read(env)), BatchWriters: int(batchWriters.Read(env)),
		ConnectorLookupURL: connectorLookupURL.Read(env), ReconcileInterval: reconcileInterval.Read(env), ReconcileGrace: reconcileGrace.Read(env),
		API: apiOn.Read(env), AdminTokens: adminTokens.Read(env), SessionTTL: sessionTTL.Read(env), TokenStore: tokenStore.Read(env),
		Migrate: migrate.Read(env), Dev: dev.Read(env), LogFormat: logFormat.Read(env), LogLevel: logLevel.Read(env),
		Tracing:     otlpEndpoint.IsSet(env) || otlpTracesEndpoint.IsSet(env),
		ServiceName: serviceName.Read(env), MetricsAddr: metricsAddr.Read(env), MetricsRefresh: metricsRefresh.Read(env),
		Pprof: pprof.Read(env), PprofRemote: pprofRemote.Read(env), PublicURL: publicURL.Read(env), TrustedProxies: trustedProxies.Read(env),
	}
	if cfg.LogFormat == "" {
		cfg.LogFormat = "json"
		if cfg.Dev {
			cfg.LogFormat = "text"
		}
	}
	if cfg.Dev {
		if !addr.IsSet(env) {
			cfg.Addr = DevAddr
		}
		if len(cfg.AdminTokens) == 0 {
			cfg.AdminTokens = []string{DevAdminToken}
		}
	}
	return cfg
}

// Validate reports every problem that must stop the server from
// starting, beyond a value its setting's parser refuses (settings.go):
// settings that go together, exposure, and secrets' strength.
func (c *Config) Validate() error {
	var errs []error
	errs = append(errs, c.validateExposure()...)
	switch {
	case c.ActionsFile != "" && (c.ConnectorURL != "" || c.ConnectorLookupURL != ""):
		errs = append(errs, errors.New("GUARDIAN_CONNECTOR_URL and GUARDIAN_CONNECTOR_LOOKUP_URL are set beside GUARDIAN_ACTIONS_FILE: the file declares every receiver; give the action that was the connector's the name fulfil there to keep its keys (docs/actions.md)"))
	case c.ActionsFile != "":
	case !c.Dev && c.ConnectorURL == "":
		errs = append(errs, errors.New("GUARDIAN_CONNECTOR_URL is empty: Guardian needs a connector to fulfil payments, or an actions file (GUARDIAN_ACTIONS_FILE); GUARDIAN_DEV=1 uses a logging connector for local development"))
	}
	if c.ConnectorURL != "" && c.ConnectorSecret == "" {
		errs = append(errs, errors.New("GUARDIAN_CONNECTOR_SECRET is empty: set a whsec_ secret to sign connector requests"))
	}
	for _, t := range c.AdminTokens {
		if len(t) < MinAdminTokenLen && t != DevAdminToken {
			errs = append(errs, fmt.Errorf("GUARDIAN_ADMIN_TOKEN: each token must be at least %d characters", MinAdminTokenLen))
			break
		}
	}
	if err := fulfilment.CheckTimings(c.ConnectorTimeout, c.DispatchLease, c.ReconcileGrace); err != nil {
		errs = append(errs, fmt.Errorf("GUARDIAN_CONNECTOR_TIMEOUT, GUARDIAN_DISPATCH_LEASE, GUARDIAN_RECONCILE_GRACE: %w", err))
	}
	if c.ConnectorLookupURL != "" && c.ConnectorURL == "" {
		errs = append(errs, errors.New("GUARDIAN_CONNECTOR_LOOKUP_URL needs GUARDIAN_CONNECTOR_URL"))
	}
	// The token store, the log level and the log format are one of a few
	// words, which their settings' parsers hold them to (settings.go).
	if c.TokenStore == "redis" && c.RedisURL == "" {
		errs = append(errs, errors.New("GUARDIAN_TOKEN_STORE=redis needs REDIS_URL"))
	}
	return errors.Join(errs...)
}

// loadActions reads the actions file, when one is named, and holds its
// receivers to the rules the connector's settings follow: strong secrets
// outside the development profile, loopback receivers inside it (its
// secrets are public), and the lease and grace above every action's
// timeout.
func (c *Config) loadActions(getenv func(string) string, mode provider.Mode) error {
	if c.ActionsFile == "" {
		return nil
	}
	names := make([]string, len(c.Providers))
	for i, p := range c.Providers {
		names[i] = p.Name()
	}
	set, err := actions.Load(c.ActionsFile, actions.Defaults{
		Timeout: c.ConnectorTimeout, TakeBack: c.RevokeOn, Providers: names, Getenv: getenv, Mode: mode,
	})
	if err != nil {
		return fmt.Errorf("GUARDIAN_ACTIONS_FILE: the actions file is refused:\n%w", err)
	}
	var errs []error
	for _, a := range set.Actions {
		where := fmt.Sprintf("GUARDIAN_ACTIONS_FILE: %s:%d: action %q", c.ActionsFile, a.Line, a.Name)
		if c.Dev {
			for _, raw := range []string{a.Receiver.URL, a.Receiver.LookupURL} {
				if u, err := url.Parse(strings.ReplaceAll(raw, "{key}", "k")); raw != "" && (err != nil || !settings.Loopback(u.Hostname())) {
					errs = append(errs, fmt.Errorf("%s: GUARDIAN_DEV=1 refuses a receiver off loopback (%s): the development profile's secrets are public", where, u.Host))
				}
			}
		}
		for _, s := range a.Receiver.Secrets {
			if c.Dev {
				break
			}
			if s == provider.DevStandardSecret {
				errs = append(errs, fmt.Errorf("%s: %s holds a public development constant", where, a.Receiver.SecretEnv))
			} else if err := provider.StrongStandardSecret(s); err != nil {
				errs = append(errs, fmt.Errorf("%s: %s %w", where, a.Receiver.SecretEnv, err))
			}
		}
		if err := fulfilment.CheckTimings(a.Receiver.Timeout, c.DispatchLease, c.ReconcileGrace); err != nil {
			errs = append(errs, fmt.Errorf("%s: timeout: %w", where, err))
		}
	}
	c.Actions = set
	return errors.Join(errs...)
}

// ItemsSources are the served providers' APIs that list what a purchase
// bought where its events name none (fulfilment.Config.Items): Stripe's,
// for a Checkout Session's line items, with GUARDIAN_STRIPE_API_KEY.
func (c *Config) ItemsSources() map[string]fulfilment.ItemsSource {
	out := map[string]fulfilment.ItemsSource{}
	for _, p := range c.Providers {
		if s, ok := p.(*provider.Stripe); ok && s.API() != nil {
			out[p.Name()] = s.API()
		}
	}
	return out
}

// itemsWarning says when routes match on products or prices that a
// served provider's events do not name and nothing here fetches.
func (c *Config) itemsWarning() string {
	for _, p := range c.Providers {
		if _, ok := p.(*provider.Stripe); ok && c.Actions != nil && c.Actions.NeedsItems(p.Name()) && c.ItemsSources()[p.Name()] == nil {
			return "GUARDIAN_ACTIONS_FILE: routes match on products or prices, and a Stripe Checkout Session's event names neither: " +
				"without GUARDIAN_STRIPE_API_KEY its line items are not fetched, and those routes never match a Checkout purchase (docs/actions.md)"
		}
	}
	return ""
}

// ActionSet is the deployment's actions: the actions file's, or without
// one the connector's settings as the one action, actions.Fulfil.
func (c *Config) ActionSet() *actions.Set {
	if c.Actions != nil {
		return c.Actions
	}
	r := actions.Receiver{URL: c.ConnectorURL, LookupURL: c.ConnectorLookupURL, Timeout: c.ConnectorTimeout}
	if c.ConnectorURL != "" {
		r.SecretEnv = connectorSecret.Name
	}
	return actions.Default(r, c.RevokeOn)
}

// DefaultPayloadRetention keeps an event's body 90 days: long past the
// providers' retries and the reconciliation of what they paid for.
const DefaultPayloadRetention = 90 * 24 * time.Hour

// MinPayloadRetention is the shortest payload retention: the providers'
// three days of retries and a day of margin, so a late delivery still meets
// its body (nothing needs it to dedupe, but an operator reading a fresh
// payment's event does).
const MinPayloadRetention = 96 * time.Hour

// MinAdminTokenLen is the least characters of an environment admin token.
// (Secrets' formats are app/provider's: provider.StrongStandardSecret,
// provider.StripeSecret.)
const MinAdminTokenLen = 16

// validateExposure holds the rules that keep public secrets, debug
// endpoints and weak secrets away from anything reachable: the development
// profile stays on loopback with a logging connector, the public
// development constants are refused outside it, and secrets have a
// minimum strength.
func (c *Config) validateExposure() []error {
	var errs []error
	if c.Dev {
		if c.ConnectorURL != "" {
			errs = append(errs, errors.New("GUARDIAN_DEV=1 refuses GUARDIAN_CONNECTOR_URL: the development profile's secrets are public, so anyone could sign an event that reaches a real connector; configure real secrets without GUARDIAN_DEV"))
		}
		if !loopback(c.Addr) {
			errs = append(errs, fmt.Errorf("GUARDIAN_DEV=1 refuses GUARDIAN_ADDR %q: the development profile listens on loopback only (say %s)", c.Addr, DevAddr))
		}
	} else {
		errs = append(errs, c.secretProblems()...)
	}
	if c.MetricsAddr != "off" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			errs = append(errs, fmt.Errorf("GUARDIAN_METRICS_ADDR: want host:port or off, got %q", c.MetricsAddr))
		}
		if c.MetricsAddr == c.Addr {
			errs = append(errs, errors.New("GUARDIAN_METRICS_ADDR must differ from GUARDIAN_ADDR: metrics are never served on the public listener"))
		}
	}
	if c.Pprof {
		switch {
		case c.MetricsAddr == "off":
			errs = append(errs, errors.New("GUARDIAN_PPROF needs the operations listener: GUARDIAN_METRICS_ADDR is off"))
		case !loopback(c.MetricsAddr) && !c.PprofRemote:
			errs = append(errs, fmt.Errorf("GUARDIAN_PPROF refuses the non-loopback GUARDIAN_METRICS_ADDR %q: profiles expose memory and stall the process; set GUARDIAN_PPROF_ALLOW_REMOTE=true if a private network guards it", c.MetricsAddr))
		}
	}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" || u.User != nil || u.RawQuery != "" {
			errs = append(errs, fmt.Errorf("GUARDIAN_PUBLIC_URL: want the origin operators use, such as https://guardian.example.com, got %q", c.PublicURL))
		}
	}
	scheme, _, isURL := strings.Cut(c.DatabaseURL, "://")
	if _, err := pgxpool.ParseConfig(c.DatabaseURL); err != nil || (isURL && scheme != "postgres" && scheme != "postgresql") {
		// The URL may hold a password: name the variable, not the value.
		errs = append(errs, errors.New("DATABASE_URL: not a Postgres URL such as postgres://user@host:5432/guardian"))
	} else if err := db.CheckPooler(c.DatabaseURL, c.DBPooler); err != nil {
		errs = append(errs, err)
	}
	if c.RedisURL != "" {
		if u, err := url.Parse(c.RedisURL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
			errs = append(errs, errors.New("REDIS_URL: want redis://host:6379/0 (or rediss://)"))
		}
	}
	if c.ConnectorURL != "" {
		if u, err := url.Parse(c.ConnectorURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, errors.New("GUARDIAN_CONNECTOR_URL: want an absolute http(s) URL"))
		}
	}
	if c.ConnectorLookupURL != "" {
		u, err := url.Parse(strings.ReplaceAll(c.ConnectorLookupURL, "{key}", "k"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || !strings.Contains(c.ConnectorLookupURL, "{key}") {
			errs = append(errs, errors.New("GUARDIAN_CONNECTOR_LOOKUP_URL: want an absolute http(s) URL containing {key}"))
		}
	}
	if _, err := web.ParseTrustedProxies(c.TrustedProxies); err != nil {
		errs = append(errs, fmt.Errorf("GUARDIAN_TRUSTED_PROXIES: %w", err))
	}
	return errs
}

// secretProblems names the secrets read here that are published
// development constants or too weak, outside the development profile.
// (Each provider checks its own: provider.Register.)
func (c *Config) secretProblems() []error {
	var errs []error
	for _, t := range c.AdminTokens {
		if t == DevAdminToken {
			errs = append(errs, errors.New("GUARDIAN_ADMIN_TOKEN holds a public development constant: it is published in Guardian's source; generate a secret of your own"))
			break
		}
	}
	if c.ConnectorSecret == provider.DevStandardSecret {
		errs = append(errs, errors.New("GUARDIAN_CONNECTOR_SECRET holds a public development constant: it is published in Guardian's source; generate a secret of your own"))
	} else if c.ConnectorSecret != "" {
		if err := provider.StrongStandardSecret(c.ConnectorSecret); err != nil {
			errs = append(errs, fmt.Errorf("GUARDIAN_CONNECTOR_SECRET %w", err))
		}
	}
	return errs
}

// loopback reports whether addr (host:port) listens on loopback only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && settings.Loopback(host)
}
