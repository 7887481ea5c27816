package wiring

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/guardian-pay/guardian/app/backfill"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/jobs"
	"github.com/guardian-pay/guardian/web"
)

// Config is Guardian's configuration, read from the environment by
// ConfigFromEnv. The README's table documents every variable.
type Config struct {
	// DatabaseURL is the Postgres URL. Defaults to DefaultDatabaseURL.
	DatabaseURL string
	// Addr is the HTTP listen address. Defaults to ":8080".
	Addr string
	// RedisURL enables the duplicate filter when set.
	RedisURL string
	// RedisPrefix starts the filter's keys. Defaults to "idem:".
	RedisPrefix string

	StripeSecrets       []string
	StandardSecrets     []string
	StripeFulfilTypes   []string
	StandardFulfilTypes []string
	// StandardPaymentPath is where Standard Webhooks bodies name the payment.
	StandardPaymentPath string
	// StripeAPIKey, when set, turns on the periodic Stripe backfill and
	// `guardian backfill stripe`. A secret: never logged.
	StripeAPIKey string
	// StripeAPIURL is Stripe's API (tests point it at a fake).
	StripeAPIURL string
	// BackfillInterval is how often the leader backfills from Stripe.
	BackfillInterval time.Duration
	// Tolerance bounds signed timestamps both ways. Defaults to 300 seconds.
	Tolerance time.Duration
	// MaxBodyBytes caps webhook bodies. Defaults to 1 MiB.
	MaxBodyBytes int64

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
	// AdminTokens admit operators; several for rotation. Required with API.
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
	// PprofAddr, when set, serves net/http/pprof on this address (keep it
	// on loopback or a private network). Unset by default.
	PprofAddr string
	// Tracing exports OpenTelemetry traces of intake and dispatch over OTLP
	// HTTP. On when OTEL_EXPORTER_OTLP_ENDPOINT or
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; off by default.
	Tracing bool
	// ServiceName names the traces' service. Defaults to "guardian"
	// (OTEL_SERVICE_NAME).
	ServiceName string
}

// defaultURL is where the CLI's client commands find a local Guardian.
const defaultURL = "http://127.0.0.1" + web.DefaultAddr

// DefaultDatabaseURL is the local Postgres of a development machine.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/guardian?sslmode=disable"

// DevAdminToken is the development profile's operator token, used only
// with GUARDIAN_DEV=1 (the profile's webhook secrets are in app/provider).
// It is public: a server started with it must never see real money.
const DevAdminToken = "dev-admin-token"

// ConfigFromEnv reads the configuration from getenv (os.Getenv in main).
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var errs []error
	dur := func(name string, def time.Duration) time.Duration {
		v := getenv(name)
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s: want a positive duration such as 30s, got %q", name, v))
			return def
		}
		return d
	}
	integer := func(name string, def int64) int64 {
		v := getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Errorf("%s: want a positive integer, got %q", name, v))
			return def
		}
		return n
	}
	boolean := func(name string, def bool) bool {
		v := getenv(name)
		if v == "" {
			return def
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: want true or false, got %q", name, v))
			return def
		}
		return b
	}

	cfg := Config{
		DatabaseURL:         cmp.Or(getenv("DATABASE_URL"), DefaultDatabaseURL),
		Addr:                cmp.Or(getenv("GUARDIAN_ADDR"), web.DefaultAddr),
		RedisURL:            getenv("REDIS_URL"),
		RedisPrefix:         cmp.Or(getenv("GUARDIAN_REDIS_PREFIX"), "idem:"),
		StripeSecrets:       list(getenv("GUARDIAN_STRIPE_SECRETS"), ","),
		StandardSecrets:     list(getenv("GUARDIAN_STANDARD_SECRETS"), " ,"),
		StripeFulfilTypes:   list(getenv("GUARDIAN_STRIPE_FULFIL_TYPES"), ","),
		StandardFulfilTypes: list(getenv("GUARDIAN_STANDARD_FULFIL_TYPES"), ","),
		StandardPaymentPath: getenv("GUARDIAN_STANDARD_PAYMENT_PATH"),
		StripeAPIKey:        getenv("GUARDIAN_STRIPE_API_KEY"),
		StripeAPIURL:        getenv("GUARDIAN_STRIPE_API_URL"),
		BackfillInterval:    dur("GUARDIAN_STRIPE_BACKFILL_INTERVAL", backfill.DefaultInterval),
		Tolerance:           dur("GUARDIAN_TIMESTAMP_TOLERANCE", provider.DefaultTolerance),
		MaxBodyBytes:        integer("GUARDIAN_MAX_BODY_BYTES", web.DefaultMaxBodyBytes),
		ConnectorURL:        getenv("GUARDIAN_CONNECTOR_URL"),
		ConnectorSecret:     getenv("GUARDIAN_CONNECTOR_SECRET"),
		ConnectorTimeout:    dur("GUARDIAN_CONNECTOR_TIMEOUT", fulfilment.DefaultConnectorTimeout),
		DispatchLease:       dur("GUARDIAN_DISPATCH_LEASE", fulfilment.DefaultDispatchLease),
		SweepInterval:       dur("GUARDIAN_SWEEP_INTERVAL", jobs.DefaultSweepInterval),
		DispatchWorkers:     int(integer("GUARDIAN_DISPATCH_WORKERS", jobs.DefaultDispatchWorkers)),
		Workers:             boolean("GUARDIAN_WORKERS", true),
		ConnectorLookupURL:  getenv("GUARDIAN_CONNECTOR_LOOKUP_URL"),
		ReconcileInterval:   dur("GUARDIAN_RECONCILE_INTERVAL", jobs.DefaultReconcileInterval),
		ReconcileGrace:      dur("GUARDIAN_RECONCILE_GRACE", fulfilment.DefaultReconcileGrace),
		API:                 boolean("GUARDIAN_API", true),
		AdminTokens:         list(getenv("GUARDIAN_ADMIN_TOKEN"), ","),
		SessionTTL:          dur("GUARDIAN_SESSION_TTL", web.DefaultSessionTTL),
		TokenStore:          cmp.Or(getenv("GUARDIAN_TOKEN_STORE"), "postgres"),
		Migrate:             boolean("GUARDIAN_MIGRATE", true),
		Dev:                 boolean("GUARDIAN_DEV", false),
		LogLevel:            cmp.Or(getenv("GUARDIAN_LOG_LEVEL"), "info"),
		Tracing:             getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "",
		PprofAddr:           getenv("GUARDIAN_PPROF_ADDR"),
		ServiceName:         cmp.Or(getenv("OTEL_SERVICE_NAME"), "guardian"),
	}
	cfg.LogFormat = getenv("GUARDIAN_LOG_FORMAT")
	if cfg.LogFormat == "" {
		cfg.LogFormat = "json"
		if cfg.Dev {
			cfg.LogFormat = "text"
		}
	}
	if cfg.Dev {
		if len(cfg.StripeSecrets) == 0 {
			cfg.StripeSecrets = []string{provider.DevStripeSecret}
		}
		if len(cfg.StandardSecrets) == 0 {
			cfg.StandardSecrets = []string{provider.DevStandardSecret}
		}
		if len(cfg.AdminTokens) == 0 {
			cfg.AdminTokens = []string{DevAdminToken}
		}
	}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	return cfg, errors.Join(errs...)
}

// Validate reports every problem that must stop the server from starting.
func (c *Config) Validate() error {
	var errs []error
	if len(c.StripeSecrets) == 0 {
		errs = append(errs, errors.New("GUARDIAN_STRIPE_SECRETS is empty: set the endpoint signing secret(s), comma-separated"))
	}
	if len(c.StandardSecrets) == 0 {
		errs = append(errs, errors.New("GUARDIAN_STANDARD_SECRETS is empty: set the whsec_ signing secret(s), space-separated"))
	}
	if !c.Dev && c.ConnectorURL == "" {
		errs = append(errs, errors.New("GUARDIAN_CONNECTOR_URL is empty: Guardian needs a connector to fulfil payments (GUARDIAN_DEV=1 uses a logging connector for local development)"))
	}
	if c.ConnectorURL != "" && c.ConnectorSecret == "" {
		errs = append(errs, errors.New("GUARDIAN_CONNECTOR_SECRET is empty: set a whsec_ secret to sign connector requests"))
	}
	if c.API && len(c.AdminTokens) == 0 {
		errs = append(errs, errors.New("GUARDIAN_ADMIN_TOKEN is empty: set the operator token(s), comma-separated, or GUARDIAN_API=false to serve no operator API"))
	}
	for _, t := range c.AdminTokens {
		if len(t) < 16 && !c.Dev {
			errs = append(errs, errors.New("GUARDIAN_ADMIN_TOKEN: each token must be at least 16 characters"))
			break
		}
	}
	if c.DispatchLease <= c.ConnectorTimeout+fulfilment.RecordMargin {
		errs = append(errs, fmt.Errorf("GUARDIAN_DISPATCH_LEASE (%s) must exceed GUARDIAN_CONNECTOR_TIMEOUT (%s) plus %s to record the outcome",
			c.DispatchLease, c.ConnectorTimeout, fulfilment.RecordMargin))
	}
	if c.ReconcileGrace < c.ConnectorTimeout {
		errs = append(errs, fmt.Errorf("GUARDIAN_RECONCILE_GRACE (%s) must be at least GUARDIAN_CONNECTOR_TIMEOUT (%s): a parked call may still be running at the receiver until then",
			c.ReconcileGrace, c.ConnectorTimeout))
	}
	if c.ConnectorLookupURL != "" && c.ConnectorURL == "" {
		errs = append(errs, errors.New("GUARDIAN_CONNECTOR_LOOKUP_URL needs GUARDIAN_CONNECTOR_URL"))
	}
	switch {
	case c.TokenStore != "postgres" && c.TokenStore != "redis":
		errs = append(errs, fmt.Errorf("GUARDIAN_TOKEN_STORE: want postgres or redis, got %q", c.TokenStore))
	case c.TokenStore == "redis" && c.RedisURL == "":
		errs = append(errs, errors.New("GUARDIAN_TOKEN_STORE=redis needs REDIS_URL"))
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		errs = append(errs, fmt.Errorf("GUARDIAN_LOG_FORMAT: want json or text, got %q", c.LogFormat))
	}
	return errors.Join(errs...)
}

// list splits v on any of seps, trimming and dropping empty items.
func list(v, seps string) []string {
	var out []string
	for _, item := range strings.FieldsFunc(v, func(r rune) bool { return strings.ContainsRune(seps, r) }) {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
