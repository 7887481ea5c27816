package refusals_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/metrics"
	"github.com/guardian-pay/guardian/app/refusals"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
)

// TestRecorderNeverWaits: a flood of refusals is queued or dropped at
// once, never waits for Postgres; what was queued is written; every one is
// counted.
func TestRecorderNeverWaits(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	r := refusals.New(db.New(d.Pool), m, slog.New(slog.DiscardHandler))
	const flood = 5000
	start := time.Now()
	for range flood {
		r.Record(db.Refusal{At: time.Now(), Provider: "stripe", Reason: "signature", Detail: "bad signature", Client: "203.0.113.9"})
	}
	require.Less(t, time.Since(start), 2*time.Second, "recording never waits for Postgres")
	require.Eventually(t, func() bool { return d.Count(t, `SELECT count(*) FROM refused_delivery`) > 0 }, 10*time.Second, 10*time.Millisecond)
	r.Close()
	r.Close() // idempotent
	written := d.Count(t, `SELECT count(*) FROM refused_delivery`)
	dropped := int(sum(t, reg, "guardian_refused_dropped_total"))
	require.Equal(t, float64(flood), sum(t, reg, "guardian_refused_total"), "every refusal is counted")
	require.LessOrEqual(t, written+dropped, flood)
	require.Positive(t, dropped, "a flood beyond the queue is dropped, not waited for")
}

// sum adds up every series of the counter named name in reg.
func sum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	total := 0.0
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// TestAPoisonRowIsLostAlone: a refusal Postgres cannot store fails alone;
// the refusals queued beside it are written.
func TestAPoisonRowIsLostAlone(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	m, err := metrics.New(prometheus.NewRegistry(), nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	r := refusals.New(db.New(d.Pool), m, slog.New(slog.DiscardHandler))
	defer r.Close()
	for i := range 9 {
		reason := db.RefusedSignature
		if i == 4 {
			reason = "no-such-reason" // what the constraint refuses
		}
		r.Record(db.Refusal{At: time.Now(), Provider: "stripe", Reason: reason, Detail: "d", Client: "203.0.113.9"})
	}
	require.Eventually(t, func() bool { return d.Count(t, `SELECT count(*) FROM refused_delivery`) == 8 }, 10*time.Second, 10*time.Millisecond,
		"the eight good refusals are written beside the poison one")
}
