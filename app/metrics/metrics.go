// Package metrics is Guardian's Prometheus instrumentation: counters and
// histograms that the intake, dispatch and reconciliation code feed, and
// gauges of the fulfilment table's shape read on a timer, never per scrape.
package metrics

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
)

// Metrics holds every Guardian metric. Its methods are safe for concurrent
// use; a nil *Metrics records nothing, so tests and tools may pass none.
type Metrics struct {
	deliveries      *prometheus.CounterVec
	intakeSeconds   *prometheus.HistogramVec
	transitions     *prometheus.CounterVec
	dispatchSeconds *prometheus.HistogramVec
	batchItems      *prometheus.HistogramVec
	dispatches      *prometheus.CounterVec
	connectorErrors *prometheus.CounterVec
	filterErrors    *prometheus.CounterVec
	refused         *prometheus.CounterVec
	refusedDropped  prometheus.Counter
	unmapped        *prometheus.CounterVec
	itemsFetches    *prometheus.CounterVec
	subscriptions   *prometheus.CounterVec
	maintenanceRuns *prometheus.CounterVec
	maintenanceRows *prometheus.CounterVec
	retention       *prometheus.GaugeVec
	table           *tableCollector
}

// New registers Guardian's metrics, Go and process collectors, and the
// fulfilment-table collector on reg. The table's gauges read through
// stats, the reader the dashboard and the API read through too, so every
// view shows one count (nil: no table gauges).
func New(reg prometheus.Registerer, stats *db.StatsReader, logger *slog.Logger) (*Metrics, error) {
	table := &tableCollector{logger: logger, reader: stats}
	m := &Metrics{
		table: table,
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "guardian_deliveries_total",
			Help: "Webhook deliveries by provider and outcome: new, duplicate_filter, duplicate_postgres, rejected_<reason>, unavailable. A delivery of several events counts once, as new if it stored any.",
		}, []string{"provider", "outcome"}),
		intakeSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "guardian_intake_duration_seconds",
			Help:    "Time from request to answer for webhook deliveries.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
		}, []string{"provider"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "guardian_transitions_total",
			Help: "Fulfilment state transitions made by this process, by action.",
		}, []string{"action", "from", "to"}),
		dispatchSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "guardian_dispatch_duration_seconds",
			Help:    "Connector call duration by action and outcome.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"action", "outcome"}),
		batchItems: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "guardian_batch_items",
			Help:    "Items per group-commit batch by kind: intake (deliveries per transaction), claim and outcome (dispatch moves per statement).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}, []string{"kind"}),
		dispatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "guardian_dispatches_total",
			Help: "Connector calls by action and outcome: done, not_sent, not_delivered, rejected, unknown.",
		}, []string{"action", "outcome"}),
		connectorErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "guardian_connector_errors_total",
			Help: "Connector calls that did not end in a 2xx, by action and class (timeout, reset, 5xx, 4xx, refused, ...).",
		}, []string{"action", "class"}),
		filterErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "guardian_filter_errors_total",
			Help: "Redis duplicate-filter calls that failed and fell back to Postgres, by operation (check, mark).",
		}, []string{"op"}),
	}
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "guardian_refused_total",
		Help: "Refused webhook requests by provider (a configured one, or unknown) and reason: signature, timestamp, malformed, mode, too_large, unreadable, unknown_provider, invalid.",
	}, []string{"provider", "reason"})
	m.refusedDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "guardian_refused_dropped_total",
		Help: "Refused requests counted but not recorded in refused_delivery: more arrived than the record takes (1,000 a second).",
	})
	m.unmapped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "guardian_unmapped_events_total",
		Help: "Events that say they are paid but name no payment Guardian can read, by provider: stored, acknowledged and flagged (GET /api/v1/events?unmapped=true). Alert on any.",
	}, []string{"provider"})
	m.itemsFetches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "guardian_items_fetches_total",
		Help: "Fetches of what a purchase bought from its provider's API (a Stripe Checkout Session's line items), by provider and outcome (ok, error). A purchase awaits its items, and pays for no action, until one succeeds.",
	}, []string{"provider", "outcome"})
	m.subscriptions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "guardian_subscription_events_total",
		Help: "Subscriptions' lives as intake records them, by provider and event: start (a subscription linked to the purchase its start paid for, once), renewal (a paid renewal, its own purchase), end (an end stored; it takes back what the start granted once the start is linked), suspension (a suspension stored: past due or paused), regrant (a resumption that grants again what a suspension took back).",
	}, []string{"provider", "event"})
	m.maintenanceRuns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "guardian_maintenance_runs_total",
		Help: "The leader's maintenance rounds, by service (sweep_stale, sweep_reversed, sweep_stranded, sweep_awaiting, prune_tokens, prune_refusals, prune_transmissions, prune_bodies) and outcome (ok, error).",
	}, []string{"service", "outcome"})
	m.maintenanceRows = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "guardian_maintenance_rows_total",
		Help: "Rows the leader's maintenance moved, requeued or pruned, by service: prune_bodies counts event bodies emptied after GUARDIAN_PAYLOAD_RETENTION (the payload gone, the event's identity and the fulfilment record kept).",
	}, []string{"service"})
	m.retention = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "guardian_retention_seconds",
		Help: "How long each kind of record is kept, by the configuration (docs/operations.md, \"What Guardian keeps\"); 0: kept for good.",
	}, []string{"record"})
	version, revision, goVersion := buildInfo()
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "guardian_build_info",
		Help:        "1, labelled with the running build's version, revision and Go version.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion},
	})
	buildInfo.Set(1)
	for _, c := range []prometheus.Collector{
		buildInfo, m.refused, m.refusedDropped, m.unmapped, m.itemsFetches, m.subscriptions, m.maintenanceRuns, m.maintenanceRows, m.retention,
		m.deliveries, m.intakeSeconds, m.transitions, m.dispatchSeconds, m.batchItems, m.dispatches, m.connectorErrors, m.filterErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.table,
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Version names this build: the module version (or "devel"), the VCS
// revision with "+dirty" when the tree had changes, and the Go version.
func Version() string {
	v, rev, goVersion := buildInfo()
	return fmt.Sprintf("guardian %s (revision %s, %s)", v, rev, goVersion)
}

func buildInfo() (version, revision, goVersion string) {
	version, revision, goVersion = "devel", "unknown", runtime.Version()
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		version = v
	}
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty {
		revision += "+dirty"
	}
	return
}

// Delivery counts one webhook delivery and its latency.
func (m *Metrics) Delivery(provider, outcome string, seconds float64) {
	if m == nil {
		return
	}
	m.deliveries.WithLabelValues(provider, outcome).Inc()
	m.intakeSeconds.WithLabelValues(provider).Observe(seconds)
}

// Batch records the size of one group-commit batch of a kind (intake,
// claim, outcome).
func (m *Metrics) Batch(kind string, items int) {
	if m == nil {
		return
	}
	m.batchItems.WithLabelValues(kind).Observe(float64(items))
}

// Transition counts moves of fulfilments of an action (bounded, as
// Dispatch's); an empty from is a fulfilment's creation, labelled "none".
func (m *Metrics) Transition(action string, from, to state.State, n int) {
	if m == nil || n == 0 {
		return
	}
	m.transitions.WithLabelValues(action, cmp.Or(string(from), "none"), string(to)).Add(float64(n))
}

// Dispatch counts one connector call of an action by outcome, and its
// error class when it did not succeed. The action label is bounded: its
// values are the names of the actions file (app/actions), "fulfil"
// without one.
func (m *Metrics) Dispatch(action string, outcome state.Outcome, class string, seconds float64) {
	if m == nil {
		return
	}
	m.dispatches.WithLabelValues(action, outcome.String()).Inc()
	m.dispatchSeconds.WithLabelValues(action, outcome.String()).Observe(seconds)
	if outcome != state.Done && class != "" {
		m.connectorErrors.WithLabelValues(action, closedClass(class)).Inc()
	}
}

// errorClasses are the label values guardian_connector_errors_total may
// carry: the connector's error classes and HTTP status classes. Anything
// else is "other", so a connector cannot grow the label set or put text of
// its own (a host name, say) into metrics.
var errorClasses = func() map[string]bool {
	set := map[string]bool{"1xx": true, "2xx": true, "3xx": true, "4xx": true, "5xx": true}
	for _, c := range connector.ErrorClasses {
		set[c] = true
	}
	return set
}()

func closedClass(class string) string {
	if errorClasses[class] {
		return class
	}
	return "other"
}

// Unmapped counts one stored event that says it is paid but names no
// payment Guardian can read (flagged on the event).
func (m *Metrics) Unmapped(provider string) {
	if m == nil {
		return
	}
	m.unmapped.WithLabelValues(provider).Inc()
}

// Subscription counts one event of a subscription's life: start, renewal
// or end.
func (m *Metrics) Subscription(provider, event string) {
	if m == nil {
		return
	}
	m.subscriptions.WithLabelValues(provider, event).Inc()
}

// ItemsFetched counts one fetch of a purchase's items from provider's API.
func (m *Metrics) ItemsFetched(provider string, err error) {
	if m == nil {
		return
	}
	m.itemsFetches.WithLabelValues(provider, map[bool]string{true: "ok", false: "error"}[err == nil]).Inc()
}

// Retention shows how long a kind of record is kept; 0 means for good.
func (m *Metrics) Retention(record string, d time.Duration) {
	if m == nil {
		return
	}
	m.retention.WithLabelValues(record).Set(d.Seconds())
}

// Maintained counts one round of the maintenance service, the n rows it
// changed, and whether it failed.
func (m *Metrics) Maintained(service string, n int, err error) {
	if m == nil {
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.maintenanceRuns.WithLabelValues(service, outcome).Inc()
	m.maintenanceRows.WithLabelValues(service).Add(float64(n))
}

// Refused counts one refused webhook request.
func (m *Metrics) Refused(provider, reason string) {
	if m == nil {
		return
	}
	m.refused.WithLabelValues(provider, reason).Inc()
}

// RefusalDropped counts a refusal the record had no room for.
func (m *Metrics) RefusalDropped() {
	if m == nil {
		return
	}
	m.refusedDropped.Inc()
}

// FilterError counts a duplicate-filter failure that fell back to Postgres.
func (m *Metrics) FilterError(op string, _ error) {
	if m == nil {
		return
	}
	m.filterErrors.WithLabelValues(op).Inc()
}

// DefaultTableRefresh is how often RunTableRefresh reads the fulfilment
// table for the gauges.
const DefaultTableRefresh = 15 * time.Second

// tableCollector serves the fulfilment table's shape from a snapshot that
// RefreshTable takes: how many rows per state, the reconciliation queue's
// depth and its oldest row's age. A scrape never queries the database, so
// scrapes, however many, cannot hold the pool that webhooks need.
type tableCollector struct {
	logger *slog.Logger

	reader *db.StatsReader

	mu     sync.Mutex
	stats  db.Stats
	readAt time.Time // zero until the first successful read
	failed bool      // the last read failed
}

var (
	fulfilmentsDesc = prometheus.NewDesc("guardian_fulfilments", "Fulfilments by state, as of the last table read.", []string{"state"}, nil)
	revocationsDesc = prometheus.NewDesc("guardian_revocations", "Revocations (payments being taken back after a refund or dispute; guardian_fulfilments counts them too) by state, as of the last table read.", []string{"state"}, nil)
	queueDesc       = prometheus.NewDesc("guardian_reconciliation_queue_depth", "Fulfilments waiting in needs_reconciliation, as of the last table read.", nil, nil)
	oldestDesc      = prometheus.NewDesc("guardian_reconciliation_oldest_age_seconds", "How long the oldest needs_reconciliation fulfilment has waited; 0 when none waits.", nil, nil)
	pendingAgeDesc  = prometheus.NewDesc("guardian_pending_oldest_age_seconds", "How long the oldest pending fulfilment has waited for dispatch since it entered pending; 0 when none waits. Above the sweep interval plus the job timeout, a payment may be stranded.", nil, nil)
	scrapeErrDesc   = prometheus.NewDesc("guardian_table_scrape_error", "1 when the last read of the fulfilment table for metrics failed.", nil, nil)
	liveDesc        = prometheus.NewDesc("guardian_live_fulfilments", "Fulfilments (revocations too) in the states a payment passes through (pending, dispatching, needs_reconciliation), by action and state, as of the last table read: each action's backlog. Absent for an action with none.", []string{"action", "state"}, nil)
	liveAgeDesc     = prometheus.NewDesc("guardian_live_oldest_age_seconds", "How long the longest-waiting fulfilment of each action has been in its state (pending, dispatching, needs_reconciliation). Absent for an action with none.", []string{"action", "state"}, nil)
	awaitingDesc    = prometheus.NewDesc("guardian_purchases_awaiting_items", "Purchases recorded awaiting their items from the provider's API (a Stripe Checkout Session whose routes match on products or prices): none of their actions is made until the fetch succeeds. As of the last table read.", nil, nil)
	awaitingAgeDesc = prometheus.NewDesc("guardian_purchases_awaiting_oldest_age_seconds", "How long the longest-waiting purchase has awaited its items; 0 when none waits.", nil, nil)
	readAgeDesc     = prometheus.NewDesc("guardian_table_read_age_seconds", "Seconds since the fulfilment table was last read for these gauges.", nil, nil)
)

// RefreshTable reads the fulfilment table's shape once for the gauges,
// through a db.StatsReader (a read costs the same at any size of the
// table). A failed read keeps the previous snapshot and sets
// guardian_table_scrape_error.
func (m *Metrics) RefreshTable(ctx context.Context) error {
	st, err := m.table.reader.Read(ctx)
	m.table.mu.Lock()
	defer m.table.mu.Unlock()
	m.table.failed = err != nil
	if err != nil {
		return err
	}
	m.table.stats, m.table.readAt = st, time.Now()
	return nil
}

// RunTableRefresh refreshes the gauges every interval until ctx ends.
func (m *Metrics) RunTableRefresh(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := m.RefreshTable(ctx); err != nil && ctx.Err() == nil {
			m.table.logger.Warn("metrics: read fulfilment table", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c *tableCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- fulfilmentsDesc
	ch <- revocationsDesc
	ch <- queueDesc
	ch <- oldestDesc
	ch <- pendingAgeDesc
	ch <- liveDesc
	ch <- liveAgeDesc
	ch <- awaitingDesc
	ch <- awaitingAgeDesc
	ch <- scrapeErrDesc
	ch <- readAgeDesc
}

func (c *tableCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	st, readAt, failed := c.stats, c.readAt, c.failed
	c.mu.Unlock()
	errValue := 0.0
	if failed {
		errValue = 1
	}
	ch <- prometheus.MustNewConstMetric(scrapeErrDesc, prometheus.GaugeValue, errValue)
	if readAt.IsZero() {
		return // nothing read yet: no gauge rather than a false zero
	}
	ch <- prometheus.MustNewConstMetric(readAgeDesc, prometheus.GaugeValue, time.Since(readAt).Seconds())
	for _, s := range state.All {
		ch <- prometheus.MustNewConstMetric(fulfilmentsDesc, prometheus.GaugeValue, float64(st.ByState[s]), string(s))
		ch <- prometheus.MustNewConstMetric(revocationsDesc, prometheus.GaugeValue, float64(st.Revocations[s]), string(s))
	}
	ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(st.ByState[state.NeedsReconciliation]))
	ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, ageOf(st.OldestNeedsReconciliation))
	ch <- prometheus.MustNewConstMetric(pendingAgeDesc, prometheus.GaugeValue, ageOf(st.OldestPending))
	for _, l := range st.Live {
		ch <- prometheus.MustNewConstMetric(liveDesc, prometheus.GaugeValue, float64(l.Count), l.Action, string(l.State))
		ch <- prometheus.MustNewConstMetric(liveAgeDesc, prometheus.GaugeValue, ageOf(&l.Oldest), l.Action, string(l.State))
	}
	ch <- prometheus.MustNewConstMetric(awaitingDesc, prometheus.GaugeValue, float64(st.AwaitingItems))
	ch <- prometheus.MustNewConstMetric(awaitingAgeDesc, prometheus.GaugeValue, ageOf(st.OldestAwaiting))
}

// ageOf is the seconds since t, or 0 for none.
func ageOf(t *time.Time) float64 {
	if t == nil {
		return 0
	}
	return time.Since(*t).Seconds()
}
