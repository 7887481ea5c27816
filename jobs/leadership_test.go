package jobs_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/connector/connectortest"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/lock"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
	"github.com/guardian-pay/guardian/jobs"
)

// TestOneLeaderRunsPeriodicWork starts two Guardian River clients on one
// database: only the leader enqueues the sweep and the reconciler; when it
// resigns the other takes over, and the old leader's resignation cannot
// remove its successor.
func TestOneLeaderRunsPeriodicWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := dbtest.NewDB(t)
	logger := slog.New(slog.DiscardHandler)
	store := db.New(d.Pool)
	enqueuer, err := jobs.NewEnqueuer(d.Pool, logger)
	require.NoError(t, err)
	// A looker, so the leader schedules the reconciler too.
	cannotTell := connectortest.LookerFunc(func(context.Context, string) (connector.Answer, map[string]any, error) {
		return connector.CannotTell, nil, nil
	})
	service, err := fulfilment.New(fulfilment.Config{Store: store, Enqueuer: enqueuer, Logger: logger, Connector: &connectortest.Recorder{}, Looker: cannotTell})
	require.NoError(t, err)
	newClient := func(id string, logger *slog.Logger) *jobs.Client {
		c, err := jobs.New(jobs.Config{
			Pool: d.Pool, Logger: logger, Service: service, Locker: lock.Postgres{Store: store}, ID: id,
			FetchPollInterval: 20 * time.Millisecond,
			SweepInterval:     time.Hour, ReconcileInterval: time.Hour, // only the start-up run happens in this test
		})
		require.NoError(t, err)
		return c
	}
	// count counts the jobs of a kind, or the rounds of a maintenance service.
	count := func(kind string) int {
		return d.Count(t, `SELECT count(*) FROM river_job WHERE kind = $1 OR (kind = 'guardian_maintain' AND args->>'service' = $1)`, kind)
	}
	var electedAt time.Time
	leader := func() string {
		var id string
		err := d.Pool.QueryRow(ctx, `SELECT leader_id, elected_at FROM river_leader`).Scan(&id, &electedAt)
		if err != nil {
			return ""
		}
		return id
	}
	stop := func(c *jobs.Client) {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, c.Stop(sctx))
	}

	a := newClient("guardian-a", logger)
	require.NoError(t, a.Start(ctx))
	require.Eventually(t, func() bool {
		return leader() == "guardian-a" && count("sweep_stale") == 1 && count("guardian_reconcile") == 1
	},
		15*time.Second, 20*time.Millisecond)

	aElectedAt := electedAt
	// B's River logs tell when its elector has bid and lost: the test waits
	// for that signal, not for a while.
	lost := make(chan struct{}, 1)
	b := newClient("guardian-b", slog.New(&signalHandler{match: "Leadership bid was unsuccessful", signal: lost}))
	require.NoError(t, b.Start(ctx))
	t.Cleanup(func() { stop(b) })
	select {
	case <-lost:
	case <-time.After(15 * time.Second):
		t.Fatal("B's elector never bid for leadership")
	}
	// A still leads, and B enqueued nothing of its own.
	require.Equal(t, "guardian-a", leader())
	require.Equal(t, 1, count("sweep_stale"), "a second process enqueued the sweep")
	require.Equal(t, 1, count("guardian_reconcile"), "a second process enqueued the reconciler")

	stop(a) // A resigns
	require.Eventually(t, func() bool {
		return leader() == "guardian-b" && count("sweep_stale") == 2 && count("guardian_reconcile") == 2
	},
		15*time.Second, 20*time.Millisecond, "B took over and ran its start-up work once")

	// A stale resignation from A (its id and election time), arriving late,
	// must not remove B.
	resigned, err := riverpgxv5.New(d.Pool).GetExecutor().LeaderResign(ctx, &riverdriver.LeaderResignParams{
		LeaderID: "guardian-a", ElectedAt: aElectedAt, LeadershipTopic: "river_leadership",
	})
	require.NoError(t, err)
	require.False(t, resigned)
	require.Equal(t, "guardian-b", leader())

	// Control: the same call with the holder's own id and election time does resign it.
	resigned, err = riverpgxv5.New(d.Pool).GetExecutor().LeaderResign(ctx, &riverdriver.LeaderResignParams{
		LeaderID: "guardian-b", ElectedAt: electedAt, LeadershipTopic: "river_leadership",
	})
	require.NoError(t, err)
	require.True(t, resigned)
}

// signalHandler is a slog handler that signals once a record's message
// contains match, and drops everything.
type signalHandler struct {
	match  string
	signal chan struct{}
}

func (h *signalHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *signalHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		select {
		case h.signal <- struct{}{}:
		default:
		}
	}
	return nil
}

func (h *signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *signalHandler) WithGroup(string) slog.Handler      { return h }
