// Package metrics is Guardian's Prometheus instrumentation: counters and
// histograms that the intake, dispatch and reconciliation code feed, and a
// collector that reads the fulfilment table's shape at scrape time.
package metrics

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

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
	dispatches      *prometheus.CounterVec
	connectorErrors *prometheus.CounterVec
	filterErrors    *prometheus.CounterVec
}

// New registers Guardian's metrics, Go and process collectors, and the
// fulfilment-table collector on reg.
func New(reg prometheus.Registerer, store *db.Store, logger *slog.Logger) (*Metrics, error) {
	m := &Metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "guardian_deliveries_total",
			Help: "Webhook deliveries by provider and outcome: new, duplicate_filter, duplicate_postgres, rejected_<reason>, unavailable.",
		}, []string{"provider", "outcome"}),
		intakeSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "guardian_intake_duration_seconds",
			Help:    "Time from request to answer for webhook deliveries.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
		}, []string{"provider"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "guardian_transitions_total",
			Help: "Fulfilment state transitions made by this process.",
		}, []string{"from", "to"}),
		dispatchSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "guardian_dispatch_duration_seconds",
			Help:    "Connector call duration by outcome.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"outcome"}),
		dispatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "guardian_dispatches_total",
			Help: "Connector calls by outcome: done, not_sent, not_delivered, rejected, unknown.",
		}, []string{"outcome"}),
		connectorErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "guardian_connector_errors_total",
			Help: "Connector calls that did not end in a 2xx, by class (timeout, reset, 5xx, 4xx, refused, ...).",
		}, []string{"class"}),
		filterErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "guardian_filter_errors_total",
			Help: "Redis duplicate-filter calls that failed and fell back to Postgres, by operation (check, mark).",
		}, []string{"op"}),
	}
	for _, c := range []prometheus.Collector{
		m.deliveries, m.intakeSeconds, m.transitions, m.dispatchSeconds, m.dispatches, m.connectorErrors, m.filterErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&tableCollector{store: store, logger: logger},
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Delivery counts one webhook delivery and its latency.
func (m *Metrics) Delivery(provider, outcome string, seconds float64) {
	if m == nil {
		return
	}
	m.deliveries.WithLabelValues(provider, outcome).Inc()
	m.intakeSeconds.WithLabelValues(provider).Observe(seconds)
}

// Transition counts moves of fulfilments; an empty from is a fulfilment's
// creation, labelled "none".
func (m *Metrics) Transition(from, to state.State, n int) {
	if m == nil || n == 0 {
		return
	}
	m.transitions.WithLabelValues(cmp.Or(string(from), "none"), string(to)).Add(float64(n))
}

// Dispatch counts one connector call by outcome, and its error class when it
// did not succeed.
func (m *Metrics) Dispatch(outcome state.Outcome, class string, seconds float64) {
	if m == nil {
		return
	}
	m.dispatches.WithLabelValues(outcome.String()).Inc()
	m.dispatchSeconds.WithLabelValues(outcome.String()).Observe(seconds)
	if outcome != state.Done && class != "" {
		m.connectorErrors.WithLabelValues(class).Inc()
	}
}

// FilterError counts a duplicate-filter failure that fell back to Postgres.
func (m *Metrics) FilterError(op string, _ error) {
	if m == nil {
		return
	}
	m.filterErrors.WithLabelValues(op).Inc()
}

// tableCollector reads the fulfilment table at scrape time: how many rows
// per state, the reconciliation queue's depth and its oldest row's age. One
// indexed query per scrape, bounded by a timeout.
type tableCollector struct {
	store  *db.Store
	logger *slog.Logger
}

var (
	fulfilmentsDesc = prometheus.NewDesc("guardian_fulfilments", "Fulfilments by state.", []string{"state"}, nil)
	queueDesc       = prometheus.NewDesc("guardian_reconciliation_queue_depth", "Fulfilments waiting in needs_reconciliation.", nil, nil)
	oldestDesc      = prometheus.NewDesc("guardian_reconciliation_oldest_age_seconds", "How long the oldest needs_reconciliation fulfilment has waited; 0 when none waits.", nil, nil)
	scrapeErrDesc   = prometheus.NewDesc("guardian_table_scrape_error", "1 when the last read of the fulfilment table for metrics failed.", nil, nil)
)

func (c *tableCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- fulfilmentsDesc
	ch <- queueDesc
	ch <- oldestDesc
	ch <- scrapeErrDesc
}

func (c *tableCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := db.GetStats(ctx, c.store.Pool())
	if err != nil {
		c.logger.Warn("metrics: read fulfilment table", "error", err)
		ch <- prometheus.MustNewConstMetric(scrapeErrDesc, prometheus.GaugeValue, 1)
		return
	}
	ch <- prometheus.MustNewConstMetric(scrapeErrDesc, prometheus.GaugeValue, 0)
	for _, s := range state.All {
		ch <- prometheus.MustNewConstMetric(fulfilmentsDesc, prometheus.GaugeValue, float64(st.ByState[s]), string(s))
	}
	ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(st.ByState[state.NeedsReconciliation]))
	age := 0.0
	if st.OldestNeedsReconciliation != nil {
		age = time.Since(*st.OldestNeedsReconciliation).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age)
}
