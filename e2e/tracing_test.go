package e2e

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/db/dbtest"
)

// TestTracesExportedWhenConfigured runs guardian with an OTLP endpoint (a
// fake collector here) and checks intake and dispatch spans arrive, with
// the ids an engineer would search by.
func TestTracesExportedWhenConfigured(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	spans := map[string]map[string]string{} // span name -> attributes
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					attrs := map[string]string{}
					for _, kv := range sp.Attributes {
						attrs[kv.Key] = kv.Value.GetStringValue()
					}
					spans[sp.Name] = attrs
				}
			}
		}
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(collector.Close)

	d := dbtest.NewDB(t)
	conn := newFakeConnector(t)
	e := baseEnv(t, d, conn)
	e["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.URL
	e["OTEL_BSP_SCHEDULE_DELAY"] = "50"
	g := start(t, e)
	body := []byte(`{"id":"evt_tr","type":"checkout.session.completed","data":{"object":{"id":"cs_pi_tr","payment_status":"paid","payment_intent":"pi_tr"}}}`)
	require.Equal(t, http.StatusOK, g.post(t, "/webhooks/stripe", providertest.SignStripe(body, stripeSecret, time.Now()), body))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return spans["guardian.intake"] != nil && spans["guardian.dispatch"] != nil
	}, 15*time.Second, 20*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, "evt_tr", spans["guardian.intake"]["guardian.event_id"])
	require.Equal(t, "pi_tr", spans["guardian.intake"]["guardian.payment_id"])
	require.Equal(t, "new", spans["guardian.intake"]["guardian.outcome"])
	require.Equal(t, "done", spans["guardian.dispatch"]["guardian.outcome"])
	require.NotEmpty(t, spans["guardian.dispatch"]["guardian.fulfilment_id"])
}
