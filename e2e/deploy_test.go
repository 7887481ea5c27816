package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/util/teststorage"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/guardian-pay/guardian/app/metrics"
	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/db/dbtest"
)

const deployDir = "../docs/deploy/"

// promQL parses as Prometheus does.
var promQL = parser.NewParser(parser.Options{})

// manifests are the Kubernetes objects of docs/deploy/kubernetes, each
// decoded strictly into its API type: an unknown or misspelt field, or a
// value of the wrong type, fails the decode as the API server would refuse
// it.
type manifests struct {
	configMaps  map[string]corev1.ConfigMap
	secrets     map[string]corev1.Secret
	deployments map[string]appsv1.Deployment
	services    []corev1.Service
	jobs        []batchv1.Job
	pdbs        []policyv1.PodDisruptionBudget
}

func loadManifests(t *testing.T) manifests {
	t.Helper()
	m := manifests{configMaps: map[string]corev1.ConfigMap{}, secrets: map[string]corev1.Secret{}, deployments: map[string]appsv1.Deployment{}}
	for _, file := range []string{"guardian.yaml", "secret.example.yaml"} {
		raw, err := os.ReadFile(deployDir + "kubernetes/" + file)
		require.NoError(t, err)
		for i, doc := range strings.Split(string(raw), "\n---\n") {
			var head metav1.TypeMeta
			require.NoError(t, yaml.Unmarshal([]byte(doc), &head), "%s #%d", file, i)
			where := fmt.Sprintf("%s #%d (%s)", file, i, head.Kind)
			switch head.APIVersion + " " + head.Kind {
			case "v1 ConfigMap":
				o := decodeStrict[corev1.ConfigMap](t, doc, where)
				m.configMaps[o.Name] = o
			case "v1 Secret":
				o := decodeStrict[corev1.Secret](t, doc, where)
				m.secrets[o.Name] = o
			case "apps/v1 Deployment":
				o := decodeStrict[appsv1.Deployment](t, doc, where)
				m.deployments[o.Name] = o
			case "v1 Service":
				m.services = append(m.services, decodeStrict[corev1.Service](t, doc, where))
			case "batch/v1 Job":
				m.jobs = append(m.jobs, decodeStrict[batchv1.Job](t, doc, where))
			case "policy/v1 PodDisruptionBudget":
				m.pdbs = append(m.pdbs, decodeStrict[policyv1.PodDisruptionBudget](t, doc, where))
			default:
				t.Fatalf("%s #%d: unexpected %s %s", file, i, head.APIVersion, head.Kind)
			}
		}
	}
	return m
}

// decodeStrict decodes one YAML document into T, refusing unknown fields.
func decodeStrict[T any](t *testing.T, doc, where string) T {
	t.Helper()
	var v T
	require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &v), where)
	return v
}

// env is what the container gets from its envFrom sources and env.
func (m manifests) env(t *testing.T, c corev1.Container) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, ok := m.configMaps[from.ConfigMapRef.Name]
			require.True(t, ok, "ConfigMap %s is not in the manifests", from.ConfigMapRef.Name)
			maps.Copy(out, cm.Data)
		case from.SecretRef != nil:
			s, ok := m.secrets[from.SecretRef.Name]
			require.True(t, ok, "Secret %s is not in the manifests", from.SecretRef.Name)
			maps.Copy(out, s.StringData)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			v, ok := m.secrets[e.ValueFrom.SecretKeyRef.Name].StringData[e.ValueFrom.SecretKeyRef.Key]
			require.True(t, ok, "secret key %s/%s is not in the manifests", e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key)
			out[e.Name] = v
			continue
		}
		out[e.Name] = e.Value
	}
	return out
}

// configCheck runs `guardian config check` with exactly env.
func configCheck(t *testing.T, env map[string]string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, "config", "check")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if exit, ok := err.(*exec.ExitError); ok {
		return string(out), exit.ExitCode()
	}
	require.NoError(t, err)
	return string(out), 0
}

// TestKubernetesManifests decodes docs/deploy/kubernetes strictly, checks
// what a deployment of Guardian needs (probes, resources, roles, selectors,
// time to drain), and runs this build's `guardian config check` on the
// configuration each Deployment's container gets.
func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	m := loadManifests(t)
	intake, ok := m.deployments["guardian-intake"]
	require.True(t, ok)
	worker, ok := m.deployments["guardian-worker"]
	require.True(t, ok)
	require.Len(t, m.deployments, 2)

	timeout, err := time.ParseDuration(m.configMaps["guardian"].Data["GUARDIAN_CONNECTOR_TIMEOUT"])
	require.NoError(t, err)
	for name, d := range m.deployments {
		spec := d.Spec.Template.Spec
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		require.NoError(t, err)
		require.True(t, sel.Matches(k8slabels.Set(d.Spec.Template.Labels)), "%s: the selector matches its pods", name)
		require.NotNil(t, spec.SecurityContext.RunAsNonRoot)
		require.True(t, *spec.SecurityContext.RunAsNonRoot, name)
		require.GreaterOrEqual(t, time.Duration(*spec.TerminationGracePeriodSeconds)*time.Second, timeout+15*time.Second,
			"%s: the grace period lets running dispatches finish (connector timeout + 15 s)", name)
		require.Len(t, spec.Containers, 1)
		c := spec.Containers[0]
		require.Equal(t, []string{"serve", "--no-migrate"}, c.Args, "%s: the migration Job migrates", name)
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		require.Equal(t, map[string]int32{"http": 8080, "metrics": 9090}, ports, name)
		for probe, path := range map[*corev1.Probe]string{c.ReadinessProbe: "/readyz", c.LivenessProbe: "/healthz"} {
			require.NotNil(t, probe, "%s: %s probe", name, path)
			require.Equal(t, path, probe.HTTPGet.Path, name)
			require.Equal(t, "http", probe.HTTPGet.Port.String(), name)
		}
		require.False(t, c.Resources.Requests.Cpu().IsZero(), "%s: a CPU request", name)
		require.False(t, c.Resources.Requests.Memory().IsZero(), "%s: a memory request", name)
		require.False(t, c.Resources.Limits.Memory().IsZero(), "%s: a memory limit", name)
		require.True(t, *c.SecurityContext.ReadOnlyRootFilesystem, name)
		require.False(t, *c.SecurityContext.AllowPrivilegeEscalation, name)

		env := m.env(t, c)
		out, code := configCheck(t, env)
		require.Zero(t, code, "%s: this build refuses the manifests' configuration:\n%s", name, out)
		require.Contains(t, out, "configuration ok")
	}
	require.Equal(t, "false", m.env(t, intake.Spec.Template.Spec.Containers[0])["GUARDIAN_WORKERS"], "intake works no jobs")
	require.Equal(t, "true", m.env(t, worker.Spec.Template.Spec.Containers[0])["GUARDIAN_WORKERS"])

	// Traffic reaches intake pods only, on their http port; the
	// disruption budget covers intake.
	require.Len(t, m.services, 1)
	svc := m.services[0]
	sel := k8slabels.SelectorFromSet(svc.Spec.Selector)
	require.True(t, sel.Matches(k8slabels.Set(intake.Spec.Template.Labels)))
	require.False(t, sel.Matches(k8slabels.Set(worker.Spec.Template.Labels)))
	for _, p := range svc.Spec.Ports {
		require.Equal(t, "http", p.TargetPort.String(), "metrics never behind the Service")
	}
	require.Len(t, m.pdbs, 1)
	pdb, err := metav1.LabelSelectorAsSelector(m.pdbs[0].Spec.Selector)
	require.NoError(t, err)
	require.True(t, pdb.Matches(k8slabels.Set(intake.Spec.Template.Labels)))

	require.Len(t, m.jobs, 1)
	require.Equal(t, []string{"migrate", "up"}, m.jobs[0].Spec.Template.Spec.Containers[0].Args)
	require.NotEmpty(t, m.env(t, m.jobs[0].Spec.Template.Spec.Containers[0])["DATABASE_URL"])

	// The check above is a real one: the same configuration with the
	// development profile's public secret is refused.
	env := m.env(t, intake.Spec.Template.Spec.Containers[0])
	env["GUARDIAN_STANDARD_SECRETS"] = provider.DevStandardSecret
	out, code := configCheck(t, env)
	require.Equal(t, 2, code, out)
}

// sample is one scraped value.
type sample struct {
	labels labels.Labels
	value  float64
}

// scrapeSamples reads g's /metrics into labelled samples, as Prometheus
// would store them, with an instance label.
func scrapeSamples(t *testing.T, g *guardian, instance string) []sample {
	t.Helper()
	resp, err := http.Get(g.metricsURL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out []sample
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, line)
		l, err := promQL.ParseMetric(line[:i])
		require.NoError(t, err, line)
		out = append(out, sample{labels.NewBuilder(l).Set("instance", instance).Labels(), v})
	}
	return out
}

// ruleBench holds scrapes at one-minute steps and evaluates alerting rules
// over them with Prometheus's rules engine. Time is compressed: each round
// of real activity is one minute, so a rule's "for" is met in seconds.
type ruleBench struct {
	t       *testing.T
	storage *teststorage.TestStorage
	base    time.Time
	rounds  int
	names   map[string]bool
}

func newRuleBench(t *testing.T) *ruleBench {
	return &ruleBench{t: t, storage: teststorage.New(t), base: time.Unix(1_700_000_000, 0), names: map[string]bool{}}
}

// record stores one round's scrapes of every process.
func (b *ruleBench) record(procs map[string]*guardian) {
	b.t.Helper()
	app := b.storage.Appender(context.Background())
	ts := b.base.Add(time.Duration(b.rounds) * time.Minute).UnixMilli()
	for instance, g := range procs {
		for _, s := range scrapeSamples(b.t, g, instance) {
			b.names[s.labels.Get(labels.MetricName)] = true
			_, err := app.Append(0, s.labels, ts, s.value)
			require.NoError(b.t, err)
		}
	}
	require.NoError(b.t, app.Commit())
	b.rounds++
}

// alertRules parses the shipped rules as Prometheus loads them.
func alertRules(t *testing.T) []rulefmt.Rule {
	t.Helper()
	groups, errs := rulefmt.ParseFile(deployDir+"prometheus/guardian-alerts.yml", false, model.UTF8Validation, promQL, slog.New(slog.DiscardHandler))
	require.Empty(t, errs)
	var out []rulefmt.Rule
	for _, g := range groups.Groups {
		out = append(out, g.Rules...)
	}
	require.NotEmpty(t, out)
	return out
}

// firing evaluates every rule at every recorded minute, in order, and
// returns the alerts firing at the end, and every metric the rules read.
func (b *ruleBench) firing(rs []rulefmt.Rule) (map[string]bool, map[string]bool) {
	b.t.Helper()
	engine := promqltest.NewTestEngine(b.t, false, 5*time.Minute, promqltest.DefaultMaxSamplesPerQuery)
	query := rules.EngineQueryFunc(engine, b.storage)
	firing, reads := map[string]bool{}, map[string]bool{}
	for _, r := range rs {
		expr, err := promQL.ParseExpr(r.Expr)
		require.NoError(b.t, err, r.Alert)
		maps.Copy(reads, metricNames(expr))
		ar := rules.NewAlertingRule(r.Alert, expr, time.Duration(r.For), 0, labels.FromMap(r.Labels), labels.FromMap(r.Annotations), labels.EmptyLabels(), "", false, slog.New(slog.DiscardHandler))
		for i := range b.rounds {
			_, err := ar.Eval(context.Background(), 0, b.base.Add(time.Duration(i)*time.Minute), query, nil, 0)
			require.NoError(b.t, err, r.Alert)
		}
		for _, a := range ar.ActiveAlerts() {
			if a.State == rules.StateFiring {
				firing[r.Alert] = true
			}
		}
	}
	return firing, reads
}

// metricNames lists the metrics an expression selects.
func metricNames(expr parser.Expr) map[string]bool {
	out := map[string]bool{}
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out[vs.Name] = true
		}
		return nil
	})
	return out
}

// describer records the metrics registered with it, by the names their
// series carry.
type describer map[string]bool

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (d describer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		name := fqName.FindStringSubmatch(desc.String())[1]
		for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
			d[name+suffix] = true
		}
	}
	return nil
}

func (d describer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = d.Register(c)
	}
}

func (d describer) Unregister(prometheus.Collector) bool { return false }

// registeredMetrics lists the metrics Guardian's metrics package registers.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	d := describer{}
	_, err := metrics.New(d, nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	return d
}

// backdateOnly moves the one fulfilment in st back by ago.
func backdateOnly(t *testing.T, d *dbtest.DB, st string, ago time.Duration) {
	t.Helper()
	var id string
	require.NoError(t, d.Pool.QueryRow(context.Background(), `SELECT id FROM fulfilment WHERE state = $1`, st).Scan(&id))
	d.Backdate(t, id, time.Now().Add(-ago))
}

// payment is a paid Checkout Session's completion for paymentID.
func payment(paymentID string) []byte {
	return stripeEvent("evt_"+paymentID, "checkout.session.completed", map[string]any{
		"id": "cs_" + paymentID, "object": "checkout.session", "mode": "payment", "status": "complete",
		"payment_status": "paid", "payment_intent": paymentID,
	})
}

func (g *guardian) pay(t *testing.T, paymentID string) {
	t.Helper()
	body := payment(paymentID)
	require.Equal(t, http.StatusOK, g.post(t, "/webhooks/stripe", providertest.SignStripe(body, stripeSecret, time.Now()), body))
}

// TestAlertRulesFireOnAnUnhealthyGuardian: a receiver that answers 401 (a
// rotated connector secret), deliveries signed with a wrong secret, a
// payment parked for two hours, and an intake whose workers are gone; each
// shipped alert fires on the metrics real Guardian processes expose.
func TestAlertRulesFireOnAnUnhealthyGuardian(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	conn := newFakeConnector(t)
	conn.fail = "pi_parked"
	conn.deny = "pi_denied_"
	g := start(t, baseEnv(t, d, conn))
	// A second deployment whose workers are gone: intake only.
	d2 := dbtest.NewDB(t)
	e2 := baseEnv(t, d2, conn)
	e2["GUARDIAN_WORKERS"] = "false"
	intake := start(t, e2)

	g.pay(t, "pi_parked")
	require.Eventually(t, func() bool { return stateCount(t, d, "needs_reconciliation") == 1 }, 15*time.Second, 20*time.Millisecond)
	backdateOnly(t, d, "needs_reconciliation", 2*time.Hour)
	intake.pay(t, "pi_waiting")
	require.Eventually(t, func() bool { return stateCount(t, d2, "pending") == 1 }, 15*time.Second, 20*time.Millisecond)
	backdateOnly(t, d2, "pending", time.Hour)
	require.Eventually(t, func() bool {
		return g.scrape(t)["guardian_reconciliation_oldest_age_seconds"] > 7000 && intake.scrape(t)["guardian_pending_oldest_age_seconds"] > 3500
	}, 10*time.Second, 50*time.Millisecond, "the table gauges show the backdated rows")

	bench := newRuleBench(t)
	forged := []byte(`{"id":"evt_forged","object":"event","type":"checkout.session.completed"}`)
	notDelivered := `guardian_dispatches_total{action="fulfil",outcome="not_delivered"}`
	for round := range 18 {
		for range 2 {
			require.Equal(t, http.StatusBadRequest, g.post(t, "/webhooks/stripe", providertest.SignStripe(forged, "whsec_not_the_endpoint_secret_at_all_0123", time.Now()), forged))
		}
		// A paid session naming no payment: stored, acknowledged, flagged.
		unmapped := []byte(fmt.Sprintf(`{"id":"evt_unmapped_%d","object":"event","type":"checkout.session.completed","data":{"object":{"object":"checkout.session","payment_status":"paid"}}}`, round))
		require.Equal(t, http.StatusOK, g.post(t, "/webhooks/stripe", providertest.SignStripe(unmapped, stripeSecret, time.Now()), unmapped))
		before := g.scrape(t)[notDelivered]
		g.pay(t, fmt.Sprintf("pi_denied_%d", round))
		require.Eventually(t, func() bool { return g.scrape(t)[notDelivered] > before }, 15*time.Second, 20*time.Millisecond)
		bench.record(map[string]*guardian{"worker": g, "intake": intake})
	}
	firing, _ := bench.firing(alertRules(t))
	require.Equal(t, map[string]bool{
		"GuardianParkedPaymentWaiting": true, "GuardianPendingNotDispatched": true, "GuardianRefusingDeliveries": true,
		"GuardianConnectorErrors": true, "GuardianReceiverNotDelivered": true, "GuardianPaidEventUnmapped": true,
	}, firing)
	require.Equal(t, 18, d.Count(t, `SELECT count(*) FROM webhook_event WHERE unmapped = 'no payment id in data.object'`), "each flagged on its event")
}

// TestDashboardAndAlertsOnAHealthyGuardian: a healthy Guardian fires no
// alert, and every metric the alert rules and the Grafana dashboard read is
// one a running Guardian exposes, in queries Prometheus parses.
func TestDashboardAndAlertsOnAHealthyGuardian(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	conn := newFakeConnector(t)
	g := start(t, baseEnv(t, d, conn))
	bench := newRuleBench(t)
	for round := range 14 {
		g.pay(t, fmt.Sprintf("pi_fine_%d", round))
		require.Eventually(t, func() bool { return stateCount(t, d, "fulfilled") == round+1 }, 15*time.Second, 20*time.Millisecond)
		bench.record(map[string]*guardian{"worker": g})
	}
	firing, reads := bench.firing(alertRules(t))
	require.Empty(t, firing)
	// What Guardian exposes: every series a scrape showed, and every
	// metric it registers (a counter with no event yet has no series).
	exposed := registeredMetrics(t)
	maps.Copy(exposed, bench.names)
	require.True(t, exposed["guardian_refused_total"] && exposed["guardian_intake_duration_seconds_bucket"], "%v", exposed)
	for name := range reads {
		require.True(t, exposed[name], "an alert reads %s, which Guardian does not expose", name)
	}

	raw, err := os.ReadFile(deployDir + "grafana/guardian.json")
	require.NoError(t, err)
	var dash struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct{ Name, Type string } `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Targets []struct {
				Expr  string `json:"expr"`
				RefID string `json:"refId"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.NotEmpty(t, dash.UID)
	require.Equal(t, "datasource", dash.Templating.List[0].Name)
	var ids []int
	for _, p := range dash.Panels {
		ids = append(ids, p.ID)
		require.NotEmpty(t, p.Targets, p.Title)
		for _, target := range p.Targets {
			// Grafana substitutes $__rate_interval before Prometheus sees it.
			expr, err := promQL.ParseExpr(strings.ReplaceAll(target.Expr, "$__rate_interval", "5m"))
			require.NoError(t, err, "%s: %s", p.Title, target.Expr)
			for name := range metricNames(expr) {
				require.True(t, exposed[name], "panel %q reads %s, which Guardian does not expose", p.Title, name)
			}
		}
	}
	slices.Sort(ids)
	require.Equal(t, len(ids), len(slices.Compact(ids)), "panel ids are unique")
}
