package main

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/guardian-pay/guardian/app/backfill"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/metrics"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/jobs"
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

	StripeSecrets       []string
	StandardSecrets     []string
	StripeFulfilTypes   []string
	StandardFulfilTypes []string
	// StandardPaymentPath is where Standard Webhooks bodies name the payment.
	StandardPaymentPath string
	// StandardRefundTypes are the Standard Webhooks types that refund the
	// payment at StandardPaymentPath in full.
	StandardRefundTypes []string
	// PaddleSecrets, when set, serves Paddle Billing at /webhooks/paddle
	// with these notification destination secrets (comma-separated; old and
	// new while rotating).
	PaddleSecrets []string
	// PaddleFulfilRenewals makes a Paddle subscription's recurring
	// transactions fulfil too. Off by default.
	PaddleFulfilRenewals bool
	// ShopifySecrets, when set, serves Shopify at /webhooks/shopify with
	// these signing secrets (the app's client secret or the store's webhook
	// signing key; comma-separated, old and new while rotating).
	ShopifySecrets []string
	// ShopifyShops, when set, are the only shops served: a public app's
	// client secret signs every installing shop's deliveries, so others are
	// refused (comma-separated domains, each shop's myshopify.com domain
	// and its primary domain where it has its own).
	ShopifyShops []string
	// LemonSqueezySecrets, when set, serves Lemon Squeezy at
	// /webhooks/lemonsqueezy with these signing secrets (comma-separated;
	// old and new while rotating).
	LemonSqueezySecrets []string
	// AdyenHMACKeys, when set, serves Adyen at /webhooks/adyen with these
	// HMAC keys (hex; comma-separated, old and new while rotating).
	AdyenHMACKeys []string
	// AdyenCapture is "automatic" (a successful AUTHORISATION pays) or
	// "manual" (a successful CAPTURE pays), as the merchant account
	// captures. Defaults to automatic.
	AdyenCapture string
	// PayPalWebhookIDs, when set, serves PayPal at /webhooks/paypal for
	// these webhooks (comma-separated ids, as the developer dashboard shows
	// them).
	PayPalWebhookIDs []string
	// StripeAPIKey, when set, turns on the periodic Stripe backfill and
	// `guardian backfill stripe`. A secret: never logged.
	StripeAPIKey string
	// StripeAPIURL is Stripe's API (tests point it at a fake). https
	// outside the development profile.
	StripeAPIURL string
	// Mode is the money this deployment serves, "live" or "test": events of
	// the other mode are refused, and a test API key is refused in live
	// mode. Defaults to live, or test in the development profile.
	Mode provider.Mode
	// PaddleAPIKey, when set, turns on the periodic Paddle backfill and
	// `guardian backfill paddle`. A secret: never logged.
	PaddleAPIKey string
	// PaddleAPIURL is Paddle's API: https://api.paddle.com, or the
	// sandbox's in test mode (the default follows GUARDIAN_MODE).
	PaddleAPIURL string
	// PayPalClientID and PayPalClientSecret, when set, turn on the
	// periodic PayPal backfill and `guardian backfill paypal`. The secret
	// is never logged.
	PayPalClientID, PayPalClientSecret string
	// PayPalAPIURL is PayPal's API: https://api-m.paypal.com, or the
	// sandbox's in test mode (the default follows GUARDIAN_MODE).
	PayPalAPIURL string
	// PayloadRetention is how long an event's body (the provider's payload,
	// personal data in it) is kept once nothing can need it; 0 keeps
	// bodies for good. Defaults to DefaultPayloadRetention.
	PayloadRetention time.Duration
	// JobRetention is how long River keeps completed and cancelled jobs.
	// Defaults to jobs.DefaultJobRetention.
	JobRetention time.Duration
	// RevokeOn is what a refund or dispute takes a fulfilled payment back
	// for (fulfilment.ReversalPolicy). Defaults to full_refund,dispute_lost.
	RevokeOn fulfilment.ReversalPolicy
	// BackfillInterval is how often the leader backfills from each
	// provider with an API key.
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

// ConfigFromEnv reads the configuration from getenv (os.Getenv in main).
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	r := &envReader{getenv: getenv}
	cfg := r.config()
	r.payloadRetention(&cfg)
	r.revokeOn(&cfg)
	if getenv("GUARDIAN_PPROF_ADDR") != "" {
		r.errs = append(r.errs, errors.New("GUARDIAN_PPROF_ADDR is gone: set GUARDIAN_PPROF=true to serve pprof on the operations listener, GUARDIAN_METRICS_ADDR"))
	}
	cfg.defaults(getenv)
	if err := cfg.Validate(); err != nil {
		r.errs = append(r.errs, err)
	}
	return cfg, errors.Join(r.errs...)
}

// envReader reads typed settings from the environment, gathering every
// error so that all are named at once.
type envReader struct {
	getenv func(string) string
	errs   []error
}

// readEnv reads the variable name with parse, def when unset; a value
// parse refuses is an error saying what is wanted.
func readEnv[T any](r *envReader, name string, def T, want string, parse func(string) (T, bool)) T {
	v := r.getenv(name)
	if v == "" {
		return def
	}
	got, ok := parse(v)
	if !ok {
		r.errs = append(r.errs, fmt.Errorf("%s: want %s, got %q", name, want, v))
		return def
	}
	return got
}

// dur reads a positive duration, def when unset.
func (r *envReader) dur(name string, def time.Duration) time.Duration {
	return readEnv(r, name, def, "a positive duration such as 30s", func(v string) (time.Duration, bool) {
		d, err := time.ParseDuration(v)
		return d, err == nil && d > 0
	})
}

// integer reads a positive integer, def when unset.
func (r *envReader) integer(name string, def int64) int64 {
	return readEnv(r, name, def, "a positive integer", func(v string) (int64, bool) {
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil && n > 0
	})
}

// boolean reads true or false, def when unset.
func (r *envReader) boolean(name string, def bool) bool {
	return readEnv(r, name, def, "true or false", func(v string) (bool, bool) {
		b, err := strconv.ParseBool(v)
		return b, err == nil
	})
}

// config reads every setting that is one variable with a default.
func (r *envReader) config() Config {
	return Config{
		DatabaseURL:          cmp.Or(r.getenv("DATABASE_URL"), DefaultDatabaseURL),
		DBPooler:             db.Pooler(cmp.Or(r.getenv("GUARDIAN_DB_POOLER"), string(db.NoPooler))),
		Addr:                 cmp.Or(r.getenv("GUARDIAN_ADDR"), web.DefaultAddr),
		RedisURL:             r.getenv("REDIS_URL"),
		RedisPrefix:          cmp.Or(r.getenv("GUARDIAN_REDIS_PREFIX"), "idem:"),
		StripeSecrets:        List(r.getenv("GUARDIAN_STRIPE_SECRETS"), ","),
		StandardSecrets:      List(r.getenv("GUARDIAN_STANDARD_SECRETS"), " ,"),
		StripeFulfilTypes:    List(r.getenv("GUARDIAN_STRIPE_FULFIL_TYPES"), ","),
		StandardFulfilTypes:  List(r.getenv("GUARDIAN_STANDARD_FULFIL_TYPES"), ","),
		StandardPaymentPath:  r.getenv("GUARDIAN_STANDARD_PAYMENT_PATH"),
		StandardRefundTypes:  List(r.getenv("GUARDIAN_STANDARD_REFUND_TYPES"), ","),
		PaddleSecrets:        List(r.getenv("GUARDIAN_PADDLE_SECRETS"), ","),
		PaddleFulfilRenewals: r.boolean("GUARDIAN_PADDLE_FULFIL_RENEWALS", false),
		ShopifySecrets:       List(r.getenv("GUARDIAN_SHOPIFY_SECRETS"), ","),
		ShopifyShops:         List(r.getenv("GUARDIAN_SHOPIFY_SHOPS"), ","),
		LemonSqueezySecrets:  List(r.getenv("GUARDIAN_LEMONSQUEEZY_SECRETS"), ","),
		AdyenHMACKeys:        List(r.getenv("GUARDIAN_ADYEN_HMAC_KEYS"), ","),
		PayPalWebhookIDs:     List(r.getenv("GUARDIAN_PAYPAL_WEBHOOK_IDS"), ","),
		AdyenCapture:         cmp.Or(r.getenv("GUARDIAN_ADYEN_CAPTURE"), provider.AdyenCaptureAutomatic),
		StripeAPIKey:         r.getenv("GUARDIAN_STRIPE_API_KEY"),
		StripeAPIURL:         r.getenv("GUARDIAN_STRIPE_API_URL"),
		Mode:                 provider.Mode(r.getenv("GUARDIAN_MODE")),
		RevokeOn:             fulfilment.DefaultReversalPolicy,
		PayloadRetention:     DefaultPayloadRetention,
		JobRetention:         r.dur("GUARDIAN_JOB_RETENTION", jobs.DefaultJobRetention),
		PaddleAPIKey:         r.getenv("GUARDIAN_PADDLE_API_KEY"),
		PaddleAPIURL:         r.getenv("GUARDIAN_PADDLE_API_URL"),
		PayPalClientID:       r.getenv("GUARDIAN_PAYPAL_CLIENT_ID"),
		PayPalClientSecret:   r.getenv("GUARDIAN_PAYPAL_CLIENT_SECRET"),
		PayPalAPIURL:         r.getenv("GUARDIAN_PAYPAL_API_URL"),
		// GUARDIAN_STRIPE_BACKFILL_INTERVAL is its older name.
		BackfillInterval:   r.dur("GUARDIAN_BACKFILL_INTERVAL", r.dur("GUARDIAN_STRIPE_BACKFILL_INTERVAL", backfill.DefaultInterval)),
		Tolerance:          r.dur("GUARDIAN_TIMESTAMP_TOLERANCE", provider.DefaultTolerance),
		MaxBodyBytes:       r.integer("GUARDIAN_MAX_BODY_BYTES", web.DefaultMaxBodyBytes),
		ConnectorURL:       r.getenv("GUARDIAN_CONNECTOR_URL"),
		ConnectorSecret:    r.getenv("GUARDIAN_CONNECTOR_SECRET"),
		ConnectorTimeout:   r.dur("GUARDIAN_CONNECTOR_TIMEOUT", fulfilment.DefaultConnectorTimeout),
		DispatchLease:      r.dur("GUARDIAN_DISPATCH_LEASE", fulfilment.DefaultDispatchLease),
		SweepInterval:      r.dur("GUARDIAN_SWEEP_INTERVAL", jobs.DefaultSweepInterval),
		DispatchWorkers:    int(r.integer("GUARDIAN_DISPATCH_WORKERS", jobs.DefaultDispatchWorkers)),
		Workers:            r.boolean("GUARDIAN_WORKERS", true),
		Batch:              int(r.integer("GUARDIAN_BATCH", fulfilment.DefaultBatch)),
		BatchWriters:       int(r.integer("GUARDIAN_BATCH_WRITERS", fulfilment.DefaultBatchWriters)),
		ConnectorLookupURL: r.getenv("GUARDIAN_CONNECTOR_LOOKUP_URL"),
		ReconcileInterval:  r.dur("GUARDIAN_RECONCILE_INTERVAL", jobs.DefaultReconcileInterval),
		ReconcileGrace:     r.dur("GUARDIAN_RECONCILE_GRACE", fulfilment.DefaultReconcileGrace),
		API:                r.boolean("GUARDIAN_API", true),
		AdminTokens:        List(r.getenv("GUARDIAN_ADMIN_TOKEN"), ","),
		SessionTTL:         r.dur("GUARDIAN_SESSION_TTL", web.DefaultSessionTTL),
		TokenStore:         cmp.Or(r.getenv("GUARDIAN_TOKEN_STORE"), "postgres"),
		Migrate:            r.boolean("GUARDIAN_MIGRATE", true),
		Dev:                r.boolean("GUARDIAN_DEV", false),
		LogLevel:           cmp.Or(r.getenv("GUARDIAN_LOG_LEVEL"), "info"),
		Tracing:            r.getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || r.getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "",
		MetricsAddr:        cmp.Or(r.getenv("GUARDIAN_METRICS_ADDR"), DefaultMetricsAddr),
		MetricsRefresh:     r.dur("GUARDIAN_METRICS_REFRESH", metrics.DefaultTableRefresh),
		Pprof:              r.boolean("GUARDIAN_PPROF", false),
		PprofRemote:        r.boolean("GUARDIAN_PPROF_ALLOW_REMOTE", false),
		PublicURL:          r.getenv("GUARDIAN_PUBLIC_URL"),
		TrustedProxies:     List(r.getenv("GUARDIAN_TRUSTED_PROXIES"), ", "),
		ServiceName:        cmp.Or(r.getenv("OTEL_SERVICE_NAME"), "guardian"),
	}
}

// payloadRetention reads GUARDIAN_PAYLOAD_RETENTION: a duration of at
// least MinPayloadRetention, or off.
func (r *envReader) payloadRetention(cfg *Config) {
	switch v := r.getenv("GUARDIAN_PAYLOAD_RETENTION"); v {
	case "":
	case "off":
		cfg.PayloadRetention = 0
	default:
		if d, err := time.ParseDuration(v); err != nil || d < MinPayloadRetention {
			r.errs = append(r.errs, fmt.Errorf("GUARDIAN_PAYLOAD_RETENTION: want a duration of at least %s (the providers retry for three days), or off; got %q", MinPayloadRetention, v))
		} else {
			cfg.PayloadRetention = d
		}
	}
}

// revokeOn reads GUARDIAN_REVOKE_ON, the reversal policy.
func (r *envReader) revokeOn(cfg *Config) {
	if v := r.getenv("GUARDIAN_REVOKE_ON"); v != "" {
		p, err := fulfilment.ParseReversalPolicy(v)
		if err != nil {
			r.errs = append(r.errs, fmt.Errorf("GUARDIAN_REVOKE_ON: %w", err))
		} else {
			cfg.RevokeOn = p
		}
	}
}

// defaults fills what depends on other settings: the log format and the
// mode, and the development profile's address, secrets and token.
func (cfg *Config) defaults(getenv func(string) string) {
	cfg.LogFormat = getenv("GUARDIAN_LOG_FORMAT")
	if cfg.LogFormat == "" {
		cfg.LogFormat = "json"
		if cfg.Dev {
			cfg.LogFormat = "text"
		}
	}
	if cfg.Mode == "" {
		cfg.Mode = provider.ModeLive
		if cfg.Dev {
			cfg.Mode = provider.ModeTest
		}
	}
	if !cfg.Dev {
		return
	}
	if getenv("GUARDIAN_ADDR") == "" {
		cfg.Addr = DevAddr
	}
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

// Validate reports every problem that must stop the server from starting.
func (c *Config) Validate() error {
	var errs []error
	errs = append(errs, c.validateExposure()...)
	if len(c.StripeSecrets) == 0 {
		errs = append(errs, errors.New("GUARDIAN_STRIPE_SECRETS is empty: set the endpoint signing secret(s), comma-separated"))
	}
	if len(c.StandardSecrets) == 0 {
		errs = append(errs, errors.New("GUARDIAN_STANDARD_SECRETS is empty: set the whsec_ signing secret(s), space- or comma-separated"))
	}
	if !c.Dev && c.ConnectorURL == "" {
		errs = append(errs, errors.New("GUARDIAN_CONNECTOR_URL is empty: Guardian needs a connector to fulfil payments (GUARDIAN_DEV=1 uses a logging connector for local development)"))
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
	if c.AdyenCapture != provider.AdyenCaptureAutomatic && c.AdyenCapture != provider.AdyenCaptureManual {
		errs = append(errs, fmt.Errorf("GUARDIAN_ADYEN_CAPTURE: want %s or %s, as the merchant account captures; got %q", provider.AdyenCaptureAutomatic, provider.AdyenCaptureManual, c.AdyenCapture))
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
	switch {
	case c.Mode != provider.ModeLive && c.Mode != provider.ModeTest:
		errs = append(errs, fmt.Errorf("GUARDIAN_MODE: want live or test, got %q", c.Mode))
	case c.Mode == provider.ModeLive && (strings.HasPrefix(c.StripeAPIKey, "sk_test_") || strings.HasPrefix(c.StripeAPIKey, "rk_test_")):
		errs = append(errs, errors.New("GUARDIAN_STRIPE_API_KEY is a test-mode key in a live deployment: the backfill would fetch test money (set GUARDIAN_MODE=test for a test deployment)"))
	case c.Mode == provider.ModeTest && (strings.HasPrefix(c.StripeAPIKey, "sk_live_") || strings.HasPrefix(c.StripeAPIKey, "rk_live_")):
		errs = append(errs, errors.New("GUARDIAN_STRIPE_API_KEY is a live-mode key in a test deployment (GUARDIAN_MODE=test)"))
	}
	for _, api := range []struct{ name, url string }{
		{"GUARDIAN_STRIPE_API_URL", c.StripeAPIURL}, {"GUARDIAN_PADDLE_API_URL", c.PaddleAPIURL}, {"GUARDIAN_PAYPAL_API_URL", c.PayPalAPIURL},
	} {
		// The credentials travel with every request: https, but for a
		// loopback host (a local fake or proxy), whose traffic never leaves
		// the machine.
		if u, err := url.Parse(api.url); api.url != "" && !c.Dev && (err != nil || u.Host == "" || (u.Scheme != "https" && !(u.Scheme == "http" && loopback(u.Host)))) {
			errs = append(errs, fmt.Errorf("%s: want an https URL outside the development profile (http only to a loopback address): the credentials travel with every request", api.name))
		}
	}
	errs = append(errs, c.backfillProblems()...)
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		errs = append(errs, fmt.Errorf("GUARDIAN_LOG_LEVEL: want debug, info, warn or error, got %q", c.LogLevel))
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		errs = append(errs, fmt.Errorf("GUARDIAN_LOG_FORMAT: want json or text, got %q", c.LogFormat))
	}
	return errors.Join(errs...)
}

// backfillProblems checks the Paddle and PayPal backfills' settings: each
// needs its provider served, and its key and API must be of the
// deployment's mode, so a live deployment never backfills sandbox money.
func (c *Config) backfillProblems() []error {
	var errs []error
	sandboxKey := strings.HasPrefix(c.PaddleAPIKey, "pdl_sdbx_")
	switch {
	case c.PaddleAPIKey == "":
	case len(c.PaddleSecrets) == 0:
		errs = append(errs, errors.New("GUARDIAN_PADDLE_API_KEY needs GUARDIAN_PADDLE_SECRETS: the backfill feeds the Paddle provider's rules"))
	case c.Mode == provider.ModeLive && (sandboxKey || strings.Contains(c.PaddleAPIURL, "sandbox")):
		errs = append(errs, errors.New("GUARDIAN_PADDLE_API_KEY or GUARDIAN_PADDLE_API_URL is the sandbox's in a live deployment: the backfill would fetch sandbox money (set GUARDIAN_MODE=test for a test deployment)"))
	case c.Mode == provider.ModeTest && (strings.HasPrefix(c.PaddleAPIKey, "pdl_live_") || c.PaddleAPIURL == DefaultPaddleAPIURL):
		errs = append(errs, errors.New("GUARDIAN_PADDLE_API_KEY or GUARDIAN_PADDLE_API_URL is live in a test deployment (GUARDIAN_MODE=test)"))
	}
	switch {
	case c.PayPalClientID == "" && c.PayPalClientSecret == "":
	case c.PayPalClientID == "" || c.PayPalClientSecret == "":
		errs = append(errs, errors.New("GUARDIAN_PAYPAL_CLIENT_ID and GUARDIAN_PAYPAL_CLIENT_SECRET go together: the confirmation of deliveries and the backfill need both"))
	case len(c.PayPalWebhookIDs) == 0:
		errs = append(errs, errors.New("GUARDIAN_PAYPAL_CLIENT_ID needs GUARDIAN_PAYPAL_WEBHOOK_IDS: the backfill feeds the PayPal provider's rules"))
	case c.Mode == provider.ModeLive && strings.Contains(c.PayPalAPIURL, "sandbox"):
		errs = append(errs, errors.New("GUARDIAN_PAYPAL_API_URL is the sandbox's in a live deployment (set GUARDIAN_MODE=test for a test deployment)"))
	case c.Mode == provider.ModeTest && c.PayPalAPIURL == DefaultPayPalAPIURL:
		errs = append(errs, errors.New("GUARDIAN_PAYPAL_API_URL is live in a test deployment (GUARDIAN_MODE=test)"))
	}
	return errs
}

// The providers' APIs, live and sandbox: the backfill's default follows
// the deployment's mode.
const (
	DefaultPaddleAPIURL        = "https://api.paddle.com"
	DefaultPaddleSandboxAPIURL = "https://sandbox-api.paddle.com"
	DefaultPayPalAPIURL        = "https://api-m.paypal.com"
	DefaultPayPalSandboxAPIURL = "https://api-m.sandbox.paypal.com"
)

// apiURL is url, or the default for the deployment's mode.
func (c *Config) apiURL(url, live, sandbox string) string {
	switch {
	case url != "":
		return url
	case c.Mode == provider.ModeTest:
		return sandbox
	}
	return live
}

// DefaultPayloadRetention keeps an event's body 90 days: long past the
// providers' retries and the reconciliation of what they paid for.
const DefaultPayloadRetention = 90 * 24 * time.Hour

// MinPayloadRetention is the shortest payload retention: the providers'
// three days of retries and a day of margin, so a late delivery still meets
// its body (nothing needs it to dedupe, but an operator reading a fresh
// payment's event does).
const MinPayloadRetention = 96 * time.Hour

// Providers names every provider Guardian serves, each at
// /webhooks/<name>.
var Providers = []string{"stripe", "standard", "paddle", "shopify", "lemonsqueezy", "adyen", "paypal"}

// ServedProviders names the providers this configuration serves: Stripe
// and Standard Webhooks always, each other one when its secrets or webhook
// ids are set: the App builds exactly these.
func (c *Config) ServedProviders() []string {
	on := map[string]bool{"stripe": true, "standard": true, "paddle": len(c.PaddleSecrets) > 0, "shopify": len(c.ShopifySecrets) > 0,
		"lemonsqueezy": len(c.LemonSqueezySecrets) > 0, "adyen": len(c.AdyenHMACKeys) > 0, "paypal": len(c.PayPalWebhookIDs) > 0}
	var out []string
	for _, p := range Providers {
		if on[p] {
			out = append(out, p)
		}
	}
	return out
}

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

// secretProblems names the secrets outside the development profile that
// are published development constants or not in their provider's format.
func (c *Config) secretProblems() []error {
	var errs []error
	public := map[string]bool{provider.DevStripeSecret: true, provider.DevStandardSecret: true, DevAdminToken: true}
	for _, v := range []struct {
		name   string
		values []string
	}{
		{"GUARDIAN_STRIPE_SECRETS", c.StripeSecrets}, {"GUARDIAN_STANDARD_SECRETS", c.StandardSecrets},
		{"GUARDIAN_ADMIN_TOKEN", c.AdminTokens}, {"GUARDIAN_CONNECTOR_SECRET", []string{c.ConnectorSecret}},
	} {
		if slices.ContainsFunc(v.values, func(s string) bool { return public[s] }) {
			errs = append(errs, fmt.Errorf("%s holds a public development constant: it is published in Guardian's source; generate a secret of your own", v.name))
		}
	}
	for _, f := range []struct {
		name   string
		values []string
		check  func(string) error
	}{
		{"GUARDIAN_STRIPE_SECRETS", c.StripeSecrets, provider.StripeSecret},
		{"GUARDIAN_PADDLE_SECRETS", c.PaddleSecrets, provider.PaddleSecret},
		{"GUARDIAN_SHOPIFY_SECRETS", c.ShopifySecrets, provider.ShopifySecret},
		{"GUARDIAN_LEMONSQUEEZY_SECRETS", c.LemonSqueezySecrets, provider.LemonSqueezySecret},
		{"GUARDIAN_ADYEN_HMAC_KEYS", c.AdyenHMACKeys, provider.AdyenHMACKey},
	} {
		for i, v := range f.values {
			if err := f.check(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: secret %d is %w", f.name, i+1, err))
				break
			}
		}
	}
	for i, v := range c.StandardSecrets {
		if err := provider.StrongStandardSecret(v); err != nil {
			errs = append(errs, fmt.Errorf("GUARDIAN_STANDARD_SECRETS: secret %d %w", i+1, secretProblem(err)))
			break
		}
	}
	if c.ConnectorSecret != "" {
		if err := provider.StrongStandardSecret(c.ConnectorSecret); err != nil {
			errs = append(errs, fmt.Errorf("GUARDIAN_CONNECTOR_SECRET %w", secretProblem(err)))
		}
	}
	return errs
}

// secretProblem words a secret check's error after the secret's name:
// "is not whsec_ followed by base64", "holds 16 random bytes, ...".
func secretProblem(err error) error {
	if errors.Is(err, provider.ErrSecretFormat) {
		return fmt.Errorf("is %w", err)
	}
	return err
}

// loopback reports whether addr (host:port) listens on loopback only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// List splits a variable's value v on any of seps, trimming and dropping
// empty items: how every list variable (secrets, tokens, types) is read.
func List(v, seps string) []string {
	var out []string
	for _, item := range strings.FieldsFunc(v, func(r rune) bool { return strings.ContainsRune(seps, r) }) {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// Variables lists every GUARDIAN_* variable Guardian reads: the server's
// configuration and the CLI's. TestVariablesAreTheOnesRead keeps it equal
// to the names the source reads.
var Variables = []string{
	"GUARDIAN_ADDR", "GUARDIAN_ADMIN_TOKEN", "GUARDIAN_ADYEN_CAPTURE", "GUARDIAN_ADYEN_HMAC_KEYS", "GUARDIAN_API", "GUARDIAN_BACKFILL_INTERVAL", "GUARDIAN_BATCH", "GUARDIAN_BATCH_WRITERS",
	"GUARDIAN_CONNECTOR_LOOKUP_URL", "GUARDIAN_CONNECTOR_SECRET", "GUARDIAN_CONNECTOR_TIMEOUT", "GUARDIAN_CONNECTOR_URL", "GUARDIAN_DB_POOLER",
	"GUARDIAN_DEV", "GUARDIAN_DISPATCH_LEASE", "GUARDIAN_DISPATCH_WORKERS", "GUARDIAN_JOB_RETENTION", "GUARDIAN_LEMONSQUEEZY_SECRETS",
	"GUARDIAN_LOG_FORMAT", "GUARDIAN_LOG_LEVEL", "GUARDIAN_MAX_BODY_BYTES", "GUARDIAN_METRICS_ADDR", "GUARDIAN_METRICS_REFRESH",
	"GUARDIAN_METRICS_URL", "GUARDIAN_MIGRATE", "GUARDIAN_MODE", "GUARDIAN_OPERATOR_TOKEN",
	"GUARDIAN_PADDLE_API_KEY", "GUARDIAN_PADDLE_API_URL", "GUARDIAN_PADDLE_FULFIL_RENEWALS", "GUARDIAN_PADDLE_SECRETS", "GUARDIAN_PAYLOAD_RETENTION",
	"GUARDIAN_PAYPAL_API_URL", "GUARDIAN_PAYPAL_CLIENT_ID", "GUARDIAN_PAYPAL_CLIENT_SECRET", "GUARDIAN_PAYPAL_WEBHOOK_IDS", "GUARDIAN_PPROF", "GUARDIAN_PPROF_ADDR",
	"GUARDIAN_PPROF_ALLOW_REMOTE", "GUARDIAN_PUBLIC_URL", "GUARDIAN_RECONCILE_GRACE", "GUARDIAN_RECONCILE_INTERVAL",
	"GUARDIAN_REDIS_PREFIX", "GUARDIAN_REVOKE_ON", "GUARDIAN_SESSION_TTL", "GUARDIAN_SHOPIFY_SECRETS", "GUARDIAN_SHOPIFY_SHOPS", "GUARDIAN_STANDARD_FULFIL_TYPES", "GUARDIAN_STANDARD_PAYMENT_PATH", "GUARDIAN_STANDARD_REFUND_TYPES", "GUARDIAN_STANDARD_SECRETS",
	"GUARDIAN_STRIPE_API_KEY", "GUARDIAN_STRIPE_API_URL", "GUARDIAN_STRIPE_BACKFILL_INTERVAL", "GUARDIAN_STRIPE_FULFIL_TYPES",
	"GUARDIAN_STRIPE_SECRETS", "GUARDIAN_SWEEP_INTERVAL", "GUARDIAN_TIMESTAMP_TOLERANCE", "GUARDIAN_TOKEN_STORE",
	"GUARDIAN_TRUSTED_PROXIES", "GUARDIAN_URL", "GUARDIAN_WORKERS",
}

// UnknownVariables returns a warning for each GUARDIAN_* name in environ
// ("NAME=value" entries) that Guardian does not read, naming the variable
// it probably meant: a misspelt name would otherwise be ignored silently.
func UnknownVariables(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "GUARDIAN_") || slices.Contains(Variables, name) {
			continue
		}
		warning := name + " is not a variable Guardian reads: it is ignored"
		best, dist := "", 4
		for _, v := range Variables {
			if d := editDistance(name, v); d < dist {
				best, dist = v, d
			}
		}
		if best != "" {
			warning += " (did you mean " + best + "?)"
		}
		out = append(out, warning)
	}
	slices.Sort(out)
	return out
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
