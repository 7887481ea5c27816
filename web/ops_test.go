package web_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/web"
)

func TestOps(t *testing.T) {
	t.Parallel()
	start := func(t *testing.T, pprof bool, background func(context.Context)) *web.Ops {
		t.Helper()
		reg := prometheus.NewRegistry()
		reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "guardian_ops_test_total", Help: "a test counter"}))
		o, err := web.NewOps(web.OpsConfig{Addr: "127.0.0.1:0", Gatherer: reg, Pprof: pprof, Background: background, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		require.NoError(t, o.Stop(context.Background()), "safe before Start")
		require.NoError(t, o.Start(context.Background()))
		return o
	}
	get := func(t *testing.T, o *web.Ops, path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + o.Addr() + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}

	t.Run("ServesMetricsAndPprofOnlyWhenAsked", func(t *testing.T) {
		t.Parallel()
		for _, pprof := range []bool{false, true} {
			o := start(t, pprof, nil)
			code, body := get(t, o, "/metrics")
			require.Equal(t, http.StatusOK, code)
			require.Contains(t, body, "guardian_ops_test_total 0")
			code, _ = get(t, o, "/debug/pprof/cmdline")
			require.Equal(t, pprof, code == http.StatusOK, "pprof %v answered %d", pprof, code)
			require.NoError(t, o.Stop(context.Background()))
		}
	})

	t.Run("StopJoinsTheBackgroundWork", func(t *testing.T) {
		t.Parallel()
		var returned atomic.Bool
		cancelled, release := make(chan struct{}), make(chan struct{})
		o := start(t, false, func(ctx context.Context) {
			<-ctx.Done()
			close(cancelled)
			<-release // a last refresh finishing
			returned.Store(true)
		})
		// While the background work runs on, Stop waits for it until its
		// own context ends, and says so.
		stopCtx, cancelStop := context.WithCancel(context.Background())
		stopped := make(chan error, 1)
		go func() { stopped <- o.Stop(stopCtx) }()
		<-cancelled
		cancelStop()
		require.ErrorContains(t, <-stopped, "background work still running")
		require.False(t, returned.Load())
		close(release)

		// Once it ends, Stop has waited for it.
		o = start(t, false, func(ctx context.Context) {
			<-ctx.Done()
			returned.Store(true)
		})
		returned.Store(false)
		require.NoError(t, o.Stop(context.Background()))
		require.True(t, returned.Load(), "Stop returned before the background work did")
		require.NoError(t, o.Stop(context.Background()), "safe twice")
		_, err := http.Get("http://" + o.Addr() + "/metrics")
		require.Error(t, err, "no longer listening")
	})
}
