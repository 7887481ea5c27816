package loadgen

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFloodSendsEachForgeryFromItsOwnAddress: every forged delivery is the
// size asked, and a flood sends n of it to the provider's route, each from
// an address of its own.
func TestFloodSendsEachForgeryFromItsOwnAddress(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]int{}
	addrs := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen[r.URL.Path] += len(body)
		addrs[r.Header.Get("X-Forwarded-For")] = true
		mu.Unlock()
		w.WriteHeader(http.StatusBadRequest)
	}))
	t.Cleanup(srv.Close)
	forged := ForgedDeliveries(4096)
	require.NotEmpty(t, forged)
	var seq atomic.Int64
	for _, f := range forged {
		require.Len(t, f.Body, 4096, f.Provider)
		status, err := Flood(context.Background(), srv.Client(), srv.URL, f, 40, 4, &seq)
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, status)
		require.Equal(t, 40*4096, seen["/webhooks/"+f.Provider], f.Provider)
	}
	require.Len(t, addrs, 40*len(forged), "each request from an address of its own")
}
