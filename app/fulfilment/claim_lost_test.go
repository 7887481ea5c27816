package fulfilment_test

import (
	"context"
	"net"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest/faultproxy"
)

// TestALostClaimAnswerIsPutBack: the claim's statement commits and its
// answer is lost with the connection (a Postgres blip right after a payment
// was acknowledged). The dispatcher that made the claim never called out,
// and finds its own claim on the row: it puts it back to pending, and the
// job's next try fulfils it under the same key. Before, the retry found
// the claim and parked a payment nothing had been sent for, to wait for an
// operator. A claim found by another call still parks (TestDispatch).
func TestALostClaimAnswerIsPutBack(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{1, 0} { // claim by claim; and the claims' group commit
		t.Run(map[int]string{1: "OneClaim", 0: "BatchedClaims"}[batch], func(t *testing.T) {
			t.Parallel()
			var proxy *faultproxy.Proxy
			b := setup(t, func(c *fulfilment.Config) {
				c.Batch = batch
				c.Store = db.New(proxied(t, c.Store.Pool(), &proxy))
			})
			id := b.pay(t, "evt_blip", "pi_blip")
			proxy.CutAfter([]byte("dispatch claimed"), 1) // the claim reaches Postgres, its answer does not
			res, err := b.svc.Dispatch(b.ctx, fulfilment.DispatchRequest{FulfilmentID: id, Actor: "dispatcher", Claimant: "river job 1"})
			require.ErrorIs(t, err, fulfilment.ErrClaimLost)
			require.Equal(t, state.Pending, res.State)
			require.Empty(t, b.rec.Calls(), "nothing was sent")
			f := b.db.Fulfilment(t, id)
			require.Equal(t, state.Pending, f.State, "the claim was put back")
			require.Equal(t, 1, f.Attempt, "the claim had committed")

			// The job's next try.
			res, err = b.svc.Dispatch(b.ctx, fulfilment.DispatchRequest{FulfilmentID: id, Actor: "dispatcher", Claimant: "river job 1"})
			require.NoError(t, err)
			require.Equal(t, state.Fulfilled, res.State)
			calls := b.rec.Calls()
			require.Len(t, calls, 1)
			require.Equal(t, f.Key, calls[0].Key, "the same key")
			require.Equal(t, 2, calls[0].Attempt)
		})
	}
}

// proxied returns a pool like pool, through a fault proxy it starts.
func proxied(t *testing.T, pool *pgxpool.Pool, proxy **faultproxy.Proxy) *pgxpool.Pool {
	t.Helper()
	cfg := pool.Config().Copy()
	p, err := faultproxy.New(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	require.NoError(t, err)
	t.Cleanup(p.Close)
	*proxy = p
	host, port, err := net.SplitHostPort(p.Addr())
	require.NoError(t, err)
	n, err := strconv.ParseUint(port, 10, 16)
	require.NoError(t, err)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(n)
	out, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(out.Close)
	return out
}
