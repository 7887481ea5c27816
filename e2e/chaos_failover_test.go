package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/db/dbtest"
	"github.com/guardian-pay/guardian/db/dbtest/replica"
)

// replicatedDB makes the database "guardian" on the pair's primary and
// returns it as the harness sees it: through the pair's multi-host URL, so
// the harness's own checks follow the primary as Guardian does.
func replicatedDB(t *testing.T, pair *replica.Pair) *dbtest.DB {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pair.Primary.URL("postgres"))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `CREATE DATABASE guardian`)
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	url := pair.URL("guardian")
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return &dbtest.DB{URL: url, Name: "guardian", Pool: pool}
}

// failover crashes the primary and promotes the standby after the time an
// HA manager takes to notice (Patroni's loop is 10 s; one here).
func failover(pair *replica.Pair) {
	pair.Primary.Crash()
	time.Sleep(time.Second)
	pair.Standby.Promote()
}

// TestChaosFailover runs two Guardian processes on a primary with a
// synchronous standby, crashes the primary under load and promotes the
// standby. Guardian is pointed at both servers as a deployment is (a
// multi-host DATABASE_URL with target_session_attrs=read-write) and is
// neither restarted nor told: every acknowledged event is on the new
// primary, every paid payment acted once, and the parked ones settle.
func TestChaosFailover(t *testing.T) {
	parallel(t)
	pair := replica.Start(t, replica.Sync)
	h := newChaos(t, chaosOpts{processes: 2, connectorMode: "idempotent", db: replicatedDB(t, pair)})
	payments := pick(120, 800)
	// Every payment sends at least two events three times: the failover
	// lands a third of the way in, with most deliveries still to come.
	in := h.inject(1, h.afterSent(int64(2*payments)), func(int) { failover(pair) })
	h.deliver(payments, 3, 16, 120*time.Second)
	in.finish()
	r := h.check(payments)
	require.Positive(t, r.fivexx, "deliveries met the failover") // else it proved nothing
	for i := range h.procs {
		resp, err := http.Get(h.proc(i).url + "/readyz")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "process %d ready again without a restart", i)
	}
	windows, unexplained := h.fivexxWindows(5 * time.Second)
	require.Zero(t, unexplained, "5xx answers outside the failover plus 5 s")
	logReport(t, "failover-sync-standby", fmt.Sprintf("%d payments x2 types x3 copies, 16 concurrent, 2 processes", payments), r,
		fmt.Sprintf(", 5xx windows %d, transport errors %d", windows, h.transport.Load()))
}

// TestChaosFailoverAsync: the same pair with asynchronous replication,
// whose standby is behind when the primary is lost. Everything the primary
// acknowledged since the standby last received is lost: the test makes
// that window certain by stopping the standby first. The merchant's
// recovery is docs/deployment.md's: stop, promote, rotate the epoch, start;
// the lost events come back by the providers' backfill or resend, under
// the keys derived from their payments, which the receiver had finished:
// it answers from its store, and nothing acts twice.
func TestChaosFailoverAsync(t *testing.T) {
	parallel(t)
	pair := replica.Start(t, replica.Async)
	h := newChaos(t, chaosOpts{processes: 1, connectorMode: "idempotent", db: replicatedDB(t, pair)})
	before, after := pick(40, 300), pick(40, 300)
	h.deliverRange(0, before)
	h.check(before)
	pair.WaitReplayed()

	pair.Standby.Stop() // behind from here on
	h.deliverRange(before, after)
	h.check(before + after)
	actedBefore := len(h.conn.entries(t))

	h.proc(0).stop(t)
	pair.Primary.Crash()
	pair.Standby.Start()
	pair.Standby.Promote()
	h.d.Pool.Reset() // its connections were to the lost primary

	// What was lost: the events acknowledged while the standby was behind,
	// and nothing acknowledged before.
	lost := map[int]int{} // 0: before the standby stopped, 1: after
	h.acked.Range(func(k, v any) bool {
		d := v.(chaosDelivery)
		if h.d.Count(t, `SELECT count(*) FROM webhook_event WHERE provider = $1 AND event_id = $2`, d.provider, k) == 0 {
			window := 0
			for i := before; i < before+after; i++ {
				if _, p := chaosPurchase(i); p == d.payment {
					window = 1
				}
			}
			lost[window]++
		}
		return true
	})
	require.Zero(t, lost[0], "events acknowledged while the standby kept up were lost")
	require.Positive(t, lost[1], "the failover lost the events the standby had not received")

	rotate := exec.Command(binary, "epoch", "rotate")
	rotate.Env = []string{"DATABASE_URL=" + h.d.URL}
	out, err := rotate.CombinedOutput()
	require.NoError(t, err, "epoch rotate: %s", out)
	h.restart(0)
	r, replayed := h.redeliverLost(before, after, actedBefore)
	logReport(t, "failover-async-standby", fmt.Sprintf("%d payments, standby stopped, %d more, primary lost, promoted, redeliveries", before, after), r,
		fmt.Sprintf(", acknowledged events lost %d, answers replayed %d", lost[1], replayed))
}
