package web

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/metrics"
	"github.com/guardian-pay/guardian/app/operators"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/refusals"
	"github.com/guardian-pay/guardian/app/tokens"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/receiver/contract"
)

// Defaults for a Server, each written once.
const (
	// DefaultAddr is the listen address.
	DefaultAddr = ":8080"
	// DefaultMaxBodyBytes caps a webhook body: 1 MiB.
	DefaultMaxBodyBytes = contract.DefaultMaxPayloadBytes
	// DefaultSessionTTL is how long a dashboard sign-in lasts.
	DefaultSessionTTL = 8 * time.Hour
)

// Config configures a Server.
type Config struct {
	// Addr is the listen address. Defaults to ":8080".
	Addr string
	// Providers are served at /webhooks/{Name()}.
	Providers []provider.Provider
	// Service is the fulfilment domain: intake, replay and resolutions.
	// Required.
	Service *fulfilment.Service
	// Ready reports whether the server can take traffic (Postgres reachable,
	// migrations current). Required.
	Ready func(ctx context.Context) error
	// ReadyDetail, when set, adds to a ready answer the state of what only
	// saves work (Redis): reported, never a reason to be unready.
	ReadyDetail func(ctx context.Context) map[string]string
	Logger      *slog.Logger
	// MaxBodyBytes caps a webhook body. Defaults to 1 MiB.
	MaxBodyBytes int64
	// IntakeTimeout bounds one delivery's work. Defaults to 10 seconds.
	IntakeTimeout time.Duration
	// Now is the clock for signature timestamps. Defaults to time.Now.
	Now func() time.Time
	// Stats reads the counts the overview and /api/v1/stats show: give it
	// the reader the metrics' gauges read through, and every view shows one
	// count. Defaults to a reader of its own over Store.
	Stats *db.StatsReader
	// Metrics counts deliveries; nil counts nothing.
	Metrics *metrics.Metrics

	// Operators admits operators to /api/v1, /riverui/ and the dashboard.
	// Nil serves none of them.
	Operators *operators.Service
	// SessionKey signs dashboard sessions (Operators.SessionKey). Required
	// with Operators.
	SessionKey []byte
	// Store serves the operator API's reads, and records refused webhook
	// requests. Required with Operators; without it refusals are counted
	// only.
	Store *db.Store
	// RiverUI, when set, is served at /riverui/ behind the admin token.
	RiverUI http.Handler
	// Tokens, when set, serves POST /api/v1/tokens (operators) and
	// POST /tokens/{token}/redeem (anyone holding a token). With Operators
	// it also enables the dashboard at /, whose resolutions it confirms.
	Tokens *tokens.Service
	// SessionTTL is how long a dashboard sign-in lasts. Defaults to 8 hours.
	SessionTTL time.Duration
	// PublicURL is the origin operators use (GUARDIAN_PUBLIC_URL). https
	// makes cookies Secure and __Host- prefixed and sends HSTS; when set it
	// is the only origin a state-changing dashboard request may come from.
	PublicURL string
	// TrustedProxies are the proxies whose X-Forwarded-For names the
	// client; empty trusts no header.
	TrustedProxies []string
	// Tracer traces each delivery; nil traces nothing.
	Tracer trace.Tracer
}

// Server serves Guardian's HTTP endpoints.
type Server struct {
	cfg  Config
	echo *echo.Echo

	// origin is PublicURL without a trailing slash; secure is whether it
	// is https.
	origin string
	secure bool
	// signIns throttles failed credentials, redeems failed token redeems,
	// per client address.
	signIns *failureLimiter
	redeems *failureLimiter
	// refusals records refused webhook requests.
	refusals *refusals.Recorder
	// refusalLines rate-limits the server log's line per refused webhook.
	refusalLines lineLimiter
	// refused limits refused webhook deliveries per client address
	// (refusedBurst, one more every refusedEvery). Only refusals spend it,
	// and every request is still verified, so a well-signed delivery from
	// a limited address is taken all the same: a provider's retry storm
	// always gets through.
	refused *failureLimiter

	// counts reads the counts the overview and /api/v1/stats show.
	counts    *db.StatsReader
	pages     map[string]*template.Template
	activity  activity
	providers map[string]provider.Provider
	now       func() time.Time
	metrics   *metrics.Metrics

	mu       sync.Mutex
	http     *http.Server
	listener net.Listener
}

// New returns a Server; Start serves it.
func New(cfg Config) (*Server, error) {
	if cfg.Service == nil || cfg.Ready == nil || cfg.Logger == nil {
		return nil, errors.New("web: service, ready and logger are required")
	}
	if len(cfg.Providers) == 0 {
		return nil, errors.New("web: at least one provider is required")
	}
	cfg.Addr = cmp.Or(cfg.Addr, DefaultAddr)
	cfg.MaxBodyBytes = cmp.Or(cfg.MaxBodyBytes, DefaultMaxBodyBytes)
	cfg.IntakeTimeout = cmp.Or(cfg.IntakeTimeout, 10*time.Second)
	cfg.SessionTTL = cmp.Or(cfg.SessionTTL, DefaultSessionTTL)
	s := &Server{cfg: cfg, providers: map[string]provider.Provider{}, now: cfg.Now, metrics: cfg.Metrics}
	if s.now == nil {
		s.now = time.Now
	}
	s.counts = cfg.Stats
	if s.counts == nil && cfg.Store != nil {
		s.counts = db.NewStatsReader(cfg.Store.Pool())
	}
	if s.cfg.Tracer == nil {
		s.cfg.Tracer = noop.NewTracerProvider().Tracer("guardian")
	}
	s.origin = strings.TrimSuffix(cfg.PublicURL, "/")
	s.secure = strings.HasPrefix(strings.ToLower(s.origin), "https://")
	s.refusals = refusals.New(cfg.Store, cfg.Metrics, cfg.Logger)
	s.signIns = newFailureLimiter(signInBurst, signInEvery, s.now)
	s.redeems = newFailureLimiter(redeemBurst, redeemEvery, s.now)
	s.refused = newFailureLimiter(refusedBurst, refusedEvery, s.now)
	proxies, err := ParseTrustedProxies(cfg.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("web: trusted proxies: %w", err)
	}
	for _, p := range cfg.Providers {
		if _, dup := s.providers[p.Name()]; dup {
			return nil, fmt.Errorf("web: provider %q configured twice", p.Name())
		}
		s.providers[p.Name()] = p
	}

	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = errorHandler(cfg.Logger)
	e.IPExtractor = clientIP(proxies)
	e.Use(s.secureHeaders)
	// Every route is listed here, and every anonymous one is justified in
	// docs/security.md ("Routes").
	e.POST("/webhooks/:provider", s.handleWebhook)
	e.GET("/healthz", s.handleHealth)
	e.GET("/readyz", s.handleReady)
	s.echo = e

	if cfg.Tokens != nil {
		e.POST("/tokens/:token/redeem", s.handleRedeem)
	}
	if cfg.Operators != nil {
		if cfg.Store == nil || len(cfg.SessionKey) < 32 {
			return nil, errors.New("web: the operator API needs a store and a session key of 32 bytes")
		}
		s.mountAPI()
		if cfg.Tokens != nil {
			e.POST("/api/v1/tokens", s.apiIssueToken, s.requireOperator)
		}
		if cfg.RiverUI != nil {
			ui := echo.WrapHandler(cfg.RiverUI)
			e.Any("/riverui", ui, riverUIGuard, s.requireOperatorOrSession)
			e.Any("/riverui/*", ui, riverUIGuard, s.requireOperatorOrSession)
		}
		if cfg.Tokens != nil {
			if err := s.mountDashboard(); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// Failed-credential limits per client address: sign-in and bearer tokens
// get 10 tries, then one every 6 seconds; token redeems 30, then one every
// 2 seconds.
const (
	signInBurst = 10
	signInEvery = 6 * time.Second
	redeemBurst = 30
	redeemEvery = 2 * time.Second
)

// Handler returns the server's routes, for tests and embedding.
func (s *Server) Handler() http.Handler { return s.echo }

// Start listens on the configured address and serves in the background. It
// returns once the listener is open, or with the error that prevented it.
func (s *Server) Start(ctx context.Context) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.cfg.Addr, err)
	}
	srv := &http.Server{
		Handler:           s.echo,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn),
	}
	s.mu.Lock()
	s.http, s.listener = srv, ln
	s.mu.Unlock()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.cfg.Logger.Error("http server stopped", "error", err)
		}
	}()
	s.cfg.Logger.Info("listening", "addr", ln.Addr().String())
	return nil
}

// Addr returns the address the server listens on, once started.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener == nil {
		return ""
	}
	return s.listener.Addr().String()
}

// Stop stops accepting connections and waits for in-flight requests until
// ctx ends, then closes what remains. Safe before Start and more than once.
func (s *Server) Stop(ctx context.Context) error {
	defer s.refusals.Close()
	s.mu.Lock()
	srv := s.http
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	if err := srv.Shutdown(ctx); err != nil {
		_ = srv.Close()
		return err
	}
	return nil
}

func (s *Server) handleHealth(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) handleReady(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	if err := s.cfg.Ready(ctx); err != nil {
		return &HTTPError{Code: http.StatusServiceUnavailable, Msg: "not ready", Err: err}
	}
	answer := map[string]string{"status": "ready"}
	if s.cfg.ReadyDetail != nil {
		for k, v := range s.cfg.ReadyDetail(ctx) {
			answer[k] = v
		}
	}
	return c.JSON(http.StatusOK, answer)
}
