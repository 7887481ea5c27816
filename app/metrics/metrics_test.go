package metrics_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/metrics"
	"github.com/guardian-pay/guardian/app/metrics/metricstest"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
)

func pending(t *testing.T, d *dbtest.DB, n int, run string) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		id := fmt.Sprintf("%s_%d", run, i)
		stored, err := db.InsertEvents(ctx, d.Pool, []db.BatchEvent{{Deliveries: 1, EventParams: db.EventParams{Provider: "stripe", EventID: "evt_" + id, Type: "checkout.session.completed", PaymentID: "pi_" + id, Payload: []byte(`{}`)}}})
		require.NoError(t, err)
		_, _, err = db.InsertFulfilment(ctx, d.Pool, stored[0].ID, "test", "a test row")
		require.NoError(t, err)
	}
}

// TestScrapesNeverQueryTheTable: the table gauges show the last refresh,
// however many scrapes come, so anonymous scrapes cannot hold the pool.
func TestScrapesNeverQueryTheTable(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, db.NewStatsReader(d.Pool), slog.New(slog.DiscardHandler))
	require.NoError(t, err)

	require.Empty(t, series(t, reg, "guardian_fulfilments"), "no gauge before the first read, rather than a false zero")

	pending(t, d, 3, "a")
	require.NoError(t, m.RefreshTable(context.Background()))
	pending(t, d, 2, "b")
	for range 5 {
		got := gauge(t, reg, "guardian_fulfilments", string(state.Pending))
		require.Equal(t, 3.0, got, "the scrape shows the snapshot, not the table")
	}
	require.NoError(t, m.RefreshTable(context.Background()))
	require.Equal(t, 5.0, gauge(t, reg, "guardian_fulfilments", string(state.Pending)))
	require.Less(t, gauge(t, reg, "guardian_pending_oldest_age_seconds", ""), 60.0)
	require.Zero(t, gauge(t, reg, "guardian_reconciliation_oldest_age_seconds", ""), "none parked")
	var oldest string
	require.NoError(t, d.Pool.QueryRow(context.Background(), `SELECT id FROM fulfilment LIMIT 1`).Scan(&oldest))
	d.Backdate(t, oldest, time.Now().Add(-time.Hour))
	require.NoError(t, m.RefreshTable(context.Background()))
	require.InDelta(t, 3600, gauge(t, reg, "guardian_pending_oldest_age_seconds", ""), 60, "the oldest pending row's wait")

	// Each action's backlog on its own.
	stored, err := db.InsertEvents(context.Background(), d.Pool, []db.BatchEvent{{Deliveries: 1, EventParams: db.EventParams{Provider: "stripe", EventID: "evt_crm", Type: "checkout.session.completed", PaymentID: "pi_crm", Payload: []byte(`{}`)}}})
	require.NoError(t, err)
	_, err = db.RecordPurchases(context.Background(), d.Pool, []db.PurchaseRecord{{Payment: db.Payment{Provider: "stripe", PaymentID: "pi_crm"}, Actions: []string{"crm_contact"}, Routes: "r"}})
	require.NoError(t, err)
	_, err = db.InsertFulfilments(context.Background(), d.Pool, []db.BatchFulfilment{{EventPK: stored[0].ID, Actor: "test"}}, db.Birth{Reason: "a test row"})
	require.NoError(t, err)
	pending(t, d, 1, "c")
	_, err = d.Pool.Exec(context.Background(), `UPDATE fulfilment SET state = 'dispatching', attempt = 1 WHERE payment_id = 'pi_c_0'`)
	require.NoError(t, err)
	require.NoError(t, m.RefreshTable(context.Background()))
	fulfil := map[string]string{"action": "fulfil", "state": "pending"}
	require.Equal(t, 5.0, metricstest.Value(t, reg, "guardian_live_fulfilments", fulfil))
	require.InDelta(t, 3600, metricstest.Value(t, reg, "guardian_live_oldest_age_seconds", fulfil), 60)
	require.Equal(t, 1.0, metricstest.Value(t, reg, "guardian_live_fulfilments", map[string]string{"action": "fulfil", "state": "dispatching"}))
	require.Equal(t, 1.0, metricstest.Value(t, reg, "guardian_live_fulfilments", map[string]string{"action": "crm_contact", "state": "pending"}))
	require.Less(t, metricstest.Value(t, reg, "guardian_live_oldest_age_seconds", map[string]string{"action": "crm_contact", "state": "pending"}), 60.0)

	// A failed read keeps the snapshot and says so.
	d.Pool.Close()
	require.Error(t, m.RefreshTable(context.Background()))
	require.Equal(t, 6.0, gauge(t, reg, "guardian_fulfilments", string(state.Pending)))
	require.Equal(t, 1.0, gauge(t, reg, "guardian_table_scrape_error", ""))
}

// TestEveryStateIsCountedAtEveryRead: a read counts every state as it is
// now, the settled ones (which grow with all history) from the tally the
// triggers keep, fulfilled revocations among them, whether or not the
// leader has folded the tally since.
func TestEveryStateIsCountedAtEveryRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := dbtest.NewDB(t)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, db.NewStatsReader(d.Pool), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	pending(t, d, 3, "a")
	require.NoError(t, m.RefreshTable(ctx))
	require.Equal(t, 3.0, gauge(t, reg, "guardian_fulfilments", string(state.Pending)))
	require.Equal(t, 0.0, gauge(t, reg, "guardian_fulfilments", string(state.Fulfilled)))

	var id string
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT id FROM fulfilment LIMIT 1`).Scan(&id))
	_, err = db.ClaimForDispatch(ctx, d.Pool, db.ClaimParams{ID: id, Actor: "test", Timeout: 30 * time.Second})
	require.NoError(t, err)
	_, err = db.Transit(ctx, d.Pool, db.TransitionParams{ID: id, From: state.Dispatching, To: state.Fulfilled, Attempt: 1, Actor: "test", Reason: "done"})
	require.NoError(t, err)
	pending(t, d, 2, "b")
	_, err = d.Pool.Exec(ctx, `INSERT INTO fulfilment (event_pk, provider, payment_id, state, idempotency_key, action)
		SELECT event_pk, provider, payment_id, 'fulfilled', guardian_revoke_key(provider, payment_id, 0), 'revoke' FROM fulfilment WHERE id = $1`, id)
	require.NoError(t, err)
	require.NoError(t, m.RefreshTable(ctx))
	require.Equal(t, 4.0, gauge(t, reg, "guardian_fulfilments", string(state.Pending)))
	require.Equal(t, 2.0, gauge(t, reg, "guardian_fulfilments", string(state.Fulfilled)), "the fulfilment and its revocation, not yet folded")
	require.Equal(t, 1.0, gauge(t, reg, "guardian_revocations", string(state.Fulfilled)))

	_, err = db.FoldTally(ctx, d.Pool)
	require.NoError(t, err)
	require.NoError(t, m.RefreshTable(ctx))
	require.Equal(t, 2.0, gauge(t, reg, "guardian_fulfilments", string(state.Fulfilled)), "the same once folded")
	require.Equal(t, 1.0, gauge(t, reg, "guardian_revocations", string(state.Fulfilled)))
	require.Equal(t, 4.0, gauge(t, reg, "guardian_fulfilments", string(state.Pending)))
}

// TestConnectorErrorClassesAreClosed: whatever a connector puts in its
// evidence, the label set stays the known classes.
func TestConnectorErrorClassesAreClosed(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	m.Dispatch("fulfil", state.Unknown, "dial tcp: lookup ledger.internal.corp: no such host", 0.1)
	m.Dispatch("fulfil", state.Unknown, "timeout", 0.1)
	m.Dispatch("fulfil", state.Declined, "4xx", 0.1)
	require.Equal(t, map[string]float64{`action="fulfil",class="4xx"`: 1, `action="fulfil",class="other"`: 1, `action="fulfil",class="timeout"`: 1}, series(t, reg, "guardian_connector_errors_total"))
}

// series returns name's values by their labels (k="v",...).
func series(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, metric := range f.GetMetric() {
			var labels []string
			for _, l := range metric.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := metric.GetGauge().GetValue() + metric.GetCounter().GetValue()
			out[strings.Join(labels, ",")] = v
		}
	}
	return out
}

func gauge(t *testing.T, reg *prometheus.Registry, name, stateLabel string) float64 {
	t.Helper()
	labels := map[string]string{}
	if stateLabel != "" {
		labels["state"] = stateLabel
	}
	return metricstest.Value(t, reg, name, labels)
}

// TestRetentionIsShown: each policy's retention is a gauge.
func TestRetentionIsShown(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, db.NewStatsReader(dbtest.NewDB(t).Pool), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	m.Retention("event_body", 90*24*time.Hour)
	m.Retention("transition", 0)
	families, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() == "guardian_retention_seconds" {
			for _, metric := range f.GetMetric() {
				got[metric.GetLabel()[0].GetValue()] = metric.GetGauge().GetValue()
			}
		}
	}
	require.Equal(t, map[string]float64{"event_body": 7776000, "transition": 0}, got)
}
