package main

import (
	"fmt"
	"time"

	"github.com/guardian-pay/guardian/app/actions"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/metrics"
	"github.com/guardian-pay/guardian/app/settings"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/jobs"
	"github.com/guardian-pay/guardian/web"
)

// The server's own settings. Each provider registers its own in its file
// (app/provider), each backfill in its (app/backfill), and the operator
// commands theirs (app/command): the README's configuration table is made
// from all of them (TestREADMEConfigurationIsTheRegistry).
var (
	databaseURL = settings.String(settings.Setting{
		Name: "DATABASE_URL", Default: "`postgres://postgres@127.0.0.1:5432/guardian?sslmode=disable`", Secret: true,
		Doc: "Postgres; its `pool_max_conns` parameter sizes the pool per process (default 25, docs/deployment.md); it may hold a password",
	}, DefaultDatabaseURL)
	dbPooler = settings.OneOf(settings.Setting{
		Name: "GUARDIAN_DB_POOLER", Default: "`none`",
		Doc: "`transaction` behind a pooler in transaction mode (PgBouncer's `pool_mode = transaction`): queries keep nothing in the session and River polls instead of listening (docs/deployment.md)",
	}, string(db.NoPooler), string(db.NoPooler), string(db.TransactionPooler))
	addr = settings.String(settings.Setting{
		Name: "GUARDIAN_ADDR", Default: "`:8080` (`127.0.0.1:8080` in dev)", Doc: "public HTTP listen address",
	}, web.DefaultAddr)
	metricsAddr = settings.String(settings.Setting{
		Name: "GUARDIAN_METRICS_ADDR", Default: "`127.0.0.1:9090`",
		Doc: "operations listener: `/metrics`, and pprof with `GUARDIAN_PPROF`; `off` serves neither. Never the public listener",
	}, DefaultMetricsAddr)
	metricsRefresh = settings.Duration(settings.Setting{
		Name: "GUARDIAN_METRICS_REFRESH", Default: "`15s`", Doc: "how often the fulfilment-table gauges are read (scrapes never query)",
	}, metrics.DefaultTableRefresh)
	pprof = settings.Bool(settings.Setting{
		Name: "GUARDIAN_PPROF", Default: "`false`",
		Doc: "serve `net/http/pprof` on the operations listener; refused off loopback unless `GUARDIAN_PPROF_ALLOW_REMOTE=true`",
	}, false)
	pprofRemote = settings.Bool(settings.Setting{
		Name: "GUARDIAN_PPROF_ALLOW_REMOTE", Default: "`false`",
		Doc: "allow pprof on a non-loopback `GUARDIAN_METRICS_ADDR`, where a private network guards it: profiles expose memory and stall the process",
	}, false)
	publicURL = settings.String(settings.Setting{
		Name: "GUARDIAN_PUBLIC_URL", Default: "unset",
		Doc: "the origin operators use, e.g. `https://guardian.example.com`: https makes cookies `Secure` and `__Host-`, sends HSTS, and is the only origin a dashboard change may come from (set it behind a TLS proxy)",
	}, "")
	trustedProxies = settings.List(settings.Setting{
		Name: "GUARDIAN_TRUSTED_PROXIES", Default: "unset",
		Doc: "CIDRs or IPs of proxies whose `X-Forwarded-For` names the client (for throttling and logs); unset, the header is ignored",
	}, ", ")
	redisURL = settings.String(settings.Setting{
		Name: "REDIS_URL", Default: "unset (no filter)", Secret: true,
		Doc: "Redis for the duplicate filter, e.g. `redis://127.0.0.1:6379/0`; it may hold a password",
	}, "")
	redisPrefix = settings.String(settings.Setting{
		Name: "GUARDIAN_REDIS_PREFIX", Default: "`idem:`",
		Doc: "filter key prefix; keys are `{prefix}{epoch}:{provider}:{event id}` (the epoch names the database the mark vouches for, so a restored or failed-over database, or another deployment sharing the Redis, never inherits marks), TTL 24 h",
	}, "idem:")
	payloadRetention = settings.New(settings.Setting{
		Name: "GUARDIAN_PAYLOAD_RETENTION", Default: "`2160h` (90 days)",
		Doc: "how long an event's body (the provider's payload, personal data in it) is kept once nothing can send it again; at least `96h`, or `off` to keep bodies (docs/operations.md, \"What Guardian keeps\")",
	}, DefaultPayloadRetention, parsePayloadRetention)
	jobRetention = settings.Duration(settings.Setting{
		Name: "GUARDIAN_JOB_RETENTION", Default: "`24h`",
		Doc: "how long River keeps completed and cancelled jobs (discarded ones a week, or as long if longer)",
	}, jobs.DefaultJobRetention)
	revokeOn = settings.New(settings.Setting{
		Name: "GUARDIAN_REVOKE_ON", Default: "`full_refund,dispute_lost,subscription_ended`",
		Doc: "what a refund, a dispute or a subscription's end takes a fulfilled payment back for (any of `full_refund`, `any_refund`, `dispute_opened`, `dispute_lost`, `subscription_ended`, `subscription_suspended` (past due or paused: taken back, and granted again once when active again), or `none`): the receiver gets a second request, `\"action\":\"revoke\"`, once per payment (docs/design.md). A refund is `full_refund` when its event says so or when the payment's refunds add up to what its paid event says was paid, in the same currency (docs/design.md, \"Whole refunds\")",
	}, actions.DefaultPolicy, actions.ParsePolicy)
	maxBodyBytes = settings.Int(settings.Setting{
		Name: "GUARDIAN_MAX_BODY_BYTES", Default: "`1048576`", Doc: "webhook body cap (413 beyond)",
	}, web.DefaultMaxBodyBytes)
	actionsFile = settings.String(settings.Setting{
		Name: "GUARDIAN_ACTIONS_FILE", Default: "unset",
		Doc: "the actions file: what purchases pay for, each action's receiver and take-back rule, and the routes that say which purchases pay for which actions (docs/actions.md); unset, `GUARDIAN_CONNECTOR_URL` is the one action `fulfil`, for every paid purchase",
	}, "")
	connectorURL = settings.String(settings.Setting{
		Name: "GUARDIAN_CONNECTOR_URL", Default: "required", Doc: "where fulfilments and revocations are POSTed (docs/receivers.md)",
	}, "")
	connectorSecret = settings.String(settings.Setting{
		Name: "GUARDIAN_CONNECTOR_SECRET", Default: "required with a URL", Secret: true,
		Doc: "`whsec_` secret (≥ 24 random bytes) signing connector requests",
	}, "")
	connectorTimeout = settings.Duration(settings.Setting{
		Name: "GUARDIAN_CONNECTOR_TIMEOUT", Default: "`30s`", Doc: "one connector call, connection included",
	}, fulfilment.DefaultConnectorTimeout)
	connectorLookupURL = settings.String(settings.Setting{
		Name: "GUARDIAN_CONNECTOR_LOOKUP_URL", Default: "unset",
		Doc: "lookup by idempotency key for automatic reconciliation, e.g. `https://svc/fulfilments/{key}`; with it, a payment refunded or disputed before Guardian recorded its fulfilment sent is asked about before it is cancelled (a restored database forgets what went out)",
	}, "")
	dispatchLease = settings.Duration(settings.Setting{
		Name: "GUARDIAN_DISPATCH_LEASE", Default: "`5m`",
		Doc: "a `dispatching` row older than this is parked; River's stuck-job rescue matches; must exceed timeout + 15 s",
	}, fulfilment.DefaultDispatchLease)
	sweepInterval = settings.Duration(settings.Setting{
		Name: "GUARDIAN_SWEEP_INTERVAL", Default: "`30s`", Doc: "how often the leader parks stale claims, takes back reversed payments and requeues stranded rows",
	}, jobs.DefaultSweepInterval)
	dispatchWorkers = settings.Int(settings.Setting{
		Name: "GUARDIAN_DISPATCH_WORKERS", Default: "`100`", Doc: "concurrent dispatches per process, shared by every action, and so the most calls a process holds open to receivers at once: a process drains a backlog at most this many per River fetch cooldown (20 ms), 5,000/s at 100, and half that when a dispatch under load outlasts a cooldown; more drain faster and make bigger batches; fewer suit receivers that take few calls at once. Purchases of several actions need one dispatch each (docs/performance.md, \"Tuning the dispatch workers\")",
	}, jobs.DefaultDispatchWorkers)
	batch = settings.Int(settings.Setting{
		Name: "GUARDIAN_BATCH", Default: "`256`",
		Doc: "most deliveries one intake transaction carries, and most claims or outcomes of concurrent dispatches one statement carries; each delivery is answered after the commit that holds it, each call leaves after its claim's commit; `1` gives each its own",
	}, fulfilment.DefaultBatch)
	batchWriters = settings.Int(settings.Setting{
		Name: "GUARDIAN_BATCH_WRITERS", Default: "`2`",
		Doc: "batches of each kind that may run at once, per process: with several nodes on one Postgres, divide it among them (docs/deployment.md, \"Sizing\")",
	}, fulfilment.DefaultBatchWriters)
	workers = settings.Bool(settings.Setting{
		Name: "GUARDIAN_WORKERS", Default: "`true`", Doc: "run River workers (dispatch, sweep, reconciler) here; `false` makes an intake-only process",
	}, true)
	reconcileInterval = settings.Duration(settings.Setting{
		Name: "GUARDIAN_RECONCILE_INTERVAL", Default: "`1m`", Doc: "how often the leader asks the lookup about parked rows",
	}, jobs.DefaultReconcileInterval)
	reconcileGrace = settings.Duration(settings.Setting{
		Name: "GUARDIAN_RECONCILE_GRACE", Default: "`1m`", Doc: "how long a row stays parked before its first lookup",
	}, fulfilment.DefaultReconcileGrace)
	apiOn = settings.Bool(settings.Setting{
		Name: "GUARDIAN_API", Default: "`true`", Doc: "serve the operator API (`/api/v1`) and River UI (`/riverui/`)",
	}, true)
	adminTokens = settings.List(settings.Setting{
		Name: "GUARDIAN_ADMIN_TOKEN", Default: "unset", Secret: true,
		Doc: "environment operator token(s) for bootstrap and automation, comma-separated, each ≥ 16 characters; audited as `admin-token`. People use named credentials: `guardian operators add NAME`",
	}, ",")
	sessionTTL = settings.Duration(settings.Setting{
		Name: "GUARDIAN_SESSION_TTL", Default: "`8h`", Doc: "how long a dashboard sign-in lasts",
	}, web.DefaultSessionTTL)
	tokenStore = settings.OneOf(settings.Setting{
		Name: "GUARDIAN_TOKEN_STORE", Default: "`postgres`",
		Doc: "where single-use tokens live: `postgres`, or `redis` (needs `REDIS_URL`; every redemption is still recorded in Postgres, so a Redis restored from an older snapshot cannot revive a spent token)",
	}, "postgres", "postgres", "redis")
	migrate = settings.Bool(settings.Setting{
		Name: "GUARDIAN_MIGRATE", Default: "`true`", Doc: "migrate at start (`guardian serve --no-migrate` also turns it off)",
	}, true)
	dev = settings.Bool(settings.Setting{
		Name: "GUARDIAN_DEV", Default: "`false`",
		Doc: "development profile: public dev secrets, admin token `dev-admin-token`, logging connector, loopback only, creates the database; refuses `GUARDIAN_CONNECTOR_URL`",
	}, false)
	logFormat = settings.OneOf(settings.Setting{
		Name: "GUARDIAN_LOG_FORMAT", Default: "`json` (`text` in dev)", Doc: "log format: `json` or `text`",
	}, "", "json", "text")
	logLevel = settings.OneOf(settings.Setting{
		Name: "GUARDIAN_LOG_LEVEL", Default: "`info`", Doc: "`debug`, `info`, `warn`, `error`",
	}, "info", "debug", "info", "warn", "error")
	otlpEndpoint = settings.String(settings.Setting{
		Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Default: "unset (tracing off)",
		Doc: "export OpenTelemetry traces of intake and dispatch over OTLP/HTTP; the other standard `OTEL_EXPORTER_OTLP_*` variables apply",
	}, "")
	otlpTracesEndpoint = settings.String(settings.Setting{
		Name: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", Default: "unset (tracing off)",
		Doc: "as `OTEL_EXPORTER_OTLP_ENDPOINT`, for traces alone",
	}, "")
	serviceName = settings.String(settings.Setting{
		Name: "OTEL_SERVICE_NAME", Default: "`guardian`", Doc: "the traces' service name",
	}, "guardian")
)

func init() {
	settings.Gone("GUARDIAN_PPROF_ADDR", "set GUARDIAN_PPROF=true to serve pprof on the operations listener, GUARDIAN_METRICS_ADDR")
}

// parsePayloadRetention reads a duration of at least MinPayloadRetention,
// or off (0: bodies kept for good).
func parsePayloadRetention(v string) (time.Duration, error) {
	if v == "off" {
		return 0, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= MinPayloadRetention {
		return d, nil
	}
	return 0, fmt.Errorf("want a duration of at least %s (the providers retry for three days), or off", MinPayloadRetention)
}
