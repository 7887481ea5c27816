package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// OpsConfig configures the operations listener.
type OpsConfig struct {
	// Addr is where it listens: never the public listener's address (the
	// configuration refuses that), loopback by default.
	Addr string
	// Gatherer is what GET /metrics serves.
	Gatherer prometheus.Gatherer
	// Pprof serves net/http/pprof under /debug/pprof/. Off by default.
	Pprof bool
	// Background, when set, runs from Start until Stop beside the listener
	// (the table gauges' refresh): Stop cancels its context and waits for
	// it to return.
	Background func(ctx context.Context)
	Logger     *slog.Logger
}

// Ops is the operations listener: Prometheus metrics and, when asked,
// pprof, on an address of its own, never the public one.
type Ops struct {
	cfg OpsConfig

	mu     sync.Mutex
	http   *http.Server
	ln     net.Listener
	cancel context.CancelFunc
	done   chan struct{}
}

// NewOps returns an operations listener; nothing listens until Start.
func NewOps(cfg OpsConfig) (*Ops, error) {
	if cfg.Addr == "" || cfg.Gatherer == nil || cfg.Logger == nil {
		return nil, errors.New("web: the operations listener needs an address, a gatherer and a logger")
	}
	return &Ops{cfg: cfg}, nil
}

// Start binds the listener, serves it, and starts Background. It returns
// once the listener is bound: a busy address is an error here, before
// anything says "listening".
func (o *Ops) Start(ctx context.Context) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(o.cfg.Gatherer, promhttp.HandlerOpts{}))
	if o.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", o.cfg.Addr)
	if err != nil {
		return fmt.Errorf("operations listener (GUARDIAN_METRICS_ADDR): %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	bgCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	o.mu.Lock()
	o.http, o.ln, o.cancel, o.done = srv, ln, cancel, done
	o.mu.Unlock()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.cfg.Logger.Error("operations listener stopped", "error", err)
		}
	}()
	go func() {
		defer close(done)
		if o.cfg.Background != nil {
			o.cfg.Background(bgCtx)
		}
	}()
	o.cfg.Logger.Info("operations listening", "addr", ln.Addr().String(), "pprof", o.cfg.Pprof)
	return nil
}

// Addr is the address it listens on, once started.
func (o *Ops) Addr() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ln == nil {
		return ""
	}
	return o.ln.Addr().String()
}

// Stop stops accepting, lets requests in flight finish until ctx ends,
// then stops Background and waits for it. Safe before Start and more than
// once.
func (o *Ops) Stop(ctx context.Context) error {
	o.mu.Lock()
	srv, cancel, done := o.http, o.cancel, o.done
	o.http, o.cancel, o.done = nil, nil, nil
	o.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Shutdown(ctx)
	if err != nil {
		_ = srv.Close()
	}
	cancel()
	select {
	case <-done:
	case <-ctx.Done():
		return errors.Join(err, fmt.Errorf("operations listener: background work still running: %w", ctx.Err()))
	}
	return err
}
