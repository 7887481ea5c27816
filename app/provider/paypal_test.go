package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
)

const (
	payPalLiveCert    = "https://api.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-aaaaaaaa"
	payPalSandboxCert = "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-bbbbbbbb"
	payPalWebhook     = "8PT597110X687430LKGECATA"
	payPalOldWebhook  = "3TR748995U920805P"
)

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPayPalSDKVector: the official Java SDK's signed transmission, with
// its sandbox certificate, verifies at the transmission's time; changed in
// any signed part, it does not.
func TestPayPalSDKVector(t *testing.T) {
	t.Parallel()
	var vector struct {
		WebhookID string            `json:"webhook_id"`
		Headers   map[string]string `json:"headers"`
	}
	if err := json.Unmarshal(readTestdata(t, "paypal/sdk_vector.json"), &vector); err != nil {
		t.Fatal(err)
	}
	body := readTestdata(t, "paypal/sdk_vector_body.json")
	cert := readTestdata(t, "paypal/sdk_vector_cert.pem")
	header := http.Header{}
	for k, v := range vector.Headers {
		header.Set(k, v)
	}
	sent, _ := time.Parse(time.RFC3339, vector.Headers["PAYPAL-TRANSMISSION-TIME"])
	fetch := func(_ context.Context, url string) ([]byte, error) {
		if url != vector.Headers["PAYPAL-CERT-URL"] {
			t.Errorf("fetched %s", url)
		}
		return cert, nil
	}
	p, err := provider.NewPayPal(provider.PayPalConfig{WebhookIDs: []string{payPalWebhook, vector.WebhookID}, Fetch: fetch})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := p.Verify(header, body, sent.Add(time.Minute))
	if err != nil {
		t.Fatalf("the SDK's vector: %v", err)
	}
	if ev.ID != "WH-7MU294299R542214K-4N1831857K851783H" || ev.Type != "PAYMENTS.PAYMENT.CREATED" || ev.Fulfils() {
		t.Errorf("read as %+v", ev)
	}

	other, _ := provider.NewPayPal(provider.PayPalConfig{WebhookIDs: []string{payPalWebhook}, Fetch: fetch})
	if _, err := other.Verify(header, body, sent); !errors.Is(err, provider.ErrSignature) {
		t.Errorf("another webhook's id: %v, want ErrSignature", err)
	}
	altered := []byte(strings.Replace(string(body), `"total":"30.11"`, `"total":"30.12"`, 1))
	if _, err := p.Verify(header, altered, sent); !errors.Is(err, provider.ErrSignature) {
		t.Errorf("altered body: %v, want ErrSignature", err)
	}
	moved := header.Clone()
	moved.Set("Paypal-Transmission-Id", "afa30d40-ca4a-11e9-ab68-7d4e2605c70d")
	if _, err := p.Verify(moved, body, sent); !errors.Is(err, provider.ErrSignature) {
		t.Errorf("another transmission id: %v, want ErrSignature", err)
	}
	if _, err := p.Verify(header, body, time.Now()); !errors.Is(err, provider.ErrTimestamp) {
		t.Errorf("replayed years later: %v, want ErrTimestamp", err)
	}
}

// payPalSetup is a PayPal provider whose certificate fetches a test
// answers, counting them.
type payPalSetup struct {
	p       *provider.PayPal
	sign    func(t *testing.T, body []byte, certURL, webhook, id string, at time.Time) http.Header
	fetches atomic.Int32
}

func newPayPal(t *testing.T, mode provider.Mode, fail error) *payPalSetup {
	t.Helper()
	live, livePEM := providertest.PayPalCertificate(t, "messageverificationcerts.paypal.com", time.Now().Add(-time.Hour))
	sandbox, sandboxPEM := providertest.PayPalCertificate(t, "messageverificationcerts.sandbox.paypal.com", time.Now().Add(-time.Hour))
	_, impostorPEM := providertest.PayPalCertificate(t, "evil.example.com", time.Now().Add(-time.Hour))
	expired, expiredPEM := providertest.PayPalCertificate(t, "messageverificationcerts.paypal.com", time.Now().Add(-48*time.Hour))
	s := &payPalSetup{}
	fetch := func(_ context.Context, url string) ([]byte, error) {
		s.fetches.Add(1)
		time.Sleep(20 * time.Millisecond) // concurrent deliveries overlap
		switch {
		case fail != nil:
			return nil, fail
		case strings.HasSuffix(url, "00000001"):
			return impostorPEM, nil
		case strings.HasSuffix(url, "00000002"):
			return expiredPEM, nil
		case strings.Contains(url, "sandbox"):
			return sandboxPEM, nil
		}
		return livePEM, nil
	}
	var err error
	s.p, err = provider.NewPayPal(provider.PayPalConfig{WebhookIDs: []string{payPalOldWebhook, payPalWebhook}, Mode: mode, Fetch: fetch})
	if err != nil {
		t.Fatal(err)
	}
	s.sign = func(t *testing.T, body []byte, certURL, webhook, id string, at time.Time) http.Header {
		key := live
		switch {
		case strings.Contains(certURL, "sandbox"):
			key = sandbox
		case strings.HasSuffix(certURL, "00000002"):
			key = expired
		}
		h, err := providertest.SignPayPal(body, key, certURL, webhook, id, at)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	return s
}

// TestPayPalVerify: where the certificate may come from, how it is
// checked and cached, and each way a transmission is refused.
func TestPayPalVerify(t *testing.T) {
	t.Parallel()
	body := readTestdata(t, "paypal/capture_completed.json")
	now := time.Now()

	t.Run("Signed", func(t *testing.T) {
		t.Parallel()
		s := newPayPal(t, provider.ModeLive, nil)
		for _, webhook := range []string{payPalWebhook, payPalOldWebhook} {
			ev, err := s.p.Verify(s.sign(t, body, payPalLiveCert, webhook, "t-"+webhook, now), body, now)
			if err != nil {
				t.Fatal(err)
			}
			if ev.ID != "WH-58D329510W468432D-8HN650336L201105X" || ev.PaymentID != "27M47624FP291604U" {
				t.Errorf("read as %+v", ev)
			}
		}
	})

	t.Run("OneFetchPerCertificate", func(t *testing.T) {
		t.Parallel()
		s := newPayPal(t, provider.ModeLive, nil)
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				h := s.sign(t, body, payPalLiveCert, payPalWebhook, "t-"+string(rune('a'+i)), now)
				if _, err := s.p.Verify(h, body, now); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if n := s.fetches.Load(); n != 1 {
			t.Errorf("%d fetches for one certificate, want 1", n)
		}
	})

	t.Run("CertificateOnlyFromPayPal", func(t *testing.T) {
		t.Parallel()
		s := newPayPal(t, provider.ModeLive, nil)
		for _, url := range []string{
			"http://api.paypal.com/v1/notifications/certs/CERT-1",
			"https://evil.example.com/v1/notifications/certs/CERT-1",
			"https://api.paypal.com.evil.example.com/v1/notifications/certs/CERT-1",
			"https://api.paypal.com@evil.example.com/v1/notifications/certs/CERT-1",
			"https://user@api.paypal.com/v1/notifications/certs/CERT-1",
			"https://api.paypal.com:8443/v1/notifications/certs/CERT-1",
			"https://api.paypal.com/v1/oauth2/token",
			"https://api.paypal.com/v1/notifications/certs/../../oauth2/token",
			"https://api.paypal.com/v1/notifications/certs/CERT-1?next=https://evil.example.com",
			"",
		} {
			h := s.sign(t, body, url, payPalWebhook, "t1", now)
			if _, err := s.p.Verify(h, body, now); !errors.Is(err, provider.ErrSignature) {
				t.Errorf("%q: %v, want ErrSignature", url, err)
			}
		}
		if n := s.fetches.Load(); n != 0 {
			t.Errorf("%d fetches from hosts that are not PayPal's", n)
		}
		// A PayPal URL whose certificate names someone else.
		h := s.sign(t, body, "https://api.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-00000001", payPalWebhook, "t1", now)
		if _, err := s.p.Verify(h, body, now); !errors.Is(err, provider.ErrSignature) {
			t.Errorf("a certificate naming another host: %v, want ErrSignature", err)
		}
		h = s.sign(t, body, "https://api.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-00000002", payPalWebhook, "t1", now)
		if _, err := s.p.Verify(h, body, now); !errors.Is(err, provider.ErrSignature) {
			t.Errorf("an expired certificate: %v, want ErrSignature", err)
		}
	})

	t.Run("Refused", func(t *testing.T) {
		t.Parallel()
		s := newPayPal(t, provider.ModeLive, nil)
		good := s.sign(t, body, payPalLiveCert, payPalWebhook, "t1", now)
		with := func(k, v string) http.Header {
			h := good.Clone()
			if v == "" {
				h.Del(k)
			} else {
				h.Set(k, v)
			}
			return h
		}
		tests := []struct {
			name   string
			header http.Header
			body   []byte
			want   error
		}{
			{"AnotherWebhook", s.sign(t, body, payPalLiveCert, "SOMEONEELSESWEBHOOK", "t1", now), body, provider.ErrSignature},
			{"AlteredByOneByte", good, []byte(strings.Replace(string(body), `"2.51"`, `"2.52"`, 1)), provider.ErrSignature},
			{"NoSignature", with("Paypal-Transmission-Sig", ""), body, provider.ErrSignature},
			{"OtherAlgorithm", with("Paypal-Auth-Algo", "SHA1withRSA"), body, provider.ErrSignature},
			{"TimeNotSigned", with("Paypal-Transmission-Time", now.Add(time.Second).UTC().Format(time.RFC3339)), body, provider.ErrSignature},
			{"Stale", s.sign(t, body, payPalLiveCert, payPalWebhook, "t1", now.Add(-time.Hour)), body, provider.ErrTimestamp},
			{"FromTheFuture", s.sign(t, body, payPalLiveCert, payPalWebhook, "t1", now.Add(time.Hour)), body, provider.ErrTimestamp},
			{"SandboxAtALiveDeployment", s.sign(t, body, payPalSandboxCert, payPalWebhook, "t1", now), body, provider.ErrMode},
		}
		for _, tt := range tests {
			if _, err := s.p.Verify(tt.header, tt.body, now); !errors.Is(err, tt.want) {
				t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
			}
		}
	})

	t.Run("PayPalDownIsUnavailableNotRefused", func(t *testing.T) {
		t.Parallel()
		s := newPayPal(t, provider.ModeLive, provider.ErrUnavailable)
		h := s.sign(t, body, payPalLiveCert, payPalWebhook, "t1", now)
		if _, err := s.p.Verify(h, body, now); !errors.Is(err, provider.ErrUnavailable) {
			t.Fatalf("%v, want ErrUnavailable", err)
		}
		// The failure is cached for a few seconds: a flood while PayPal is
		// down fetches once, and is answered 503 from the cache.
		for range 50 {
			if _, err := s.p.Verify(h, body, now); !errors.Is(err, provider.ErrUnavailable) {
				t.Fatalf("%v, want ErrUnavailable", err)
			}
		}
		if s.fetches.Load() != 1 {
			t.Errorf("a failed fetch was not cached: %d fetches for 51 deliveries", s.fetches.Load())
		}
	})
}

// TestPayPalRules: a completed capture fulfils the capture; an approved
// order and a pending capture never do; a capture naming no id is flagged.
func TestPayPalRules(t *testing.T) {
	t.Parallel()
	s := newPayPal(t, provider.ModeTest, nil)
	now := time.Now()
	event := func(typ, resource string) []byte {
		return []byte(`{"id":"WH-1","event_type":"` + typ + `","resource_type":"capture","resource":` + resource + `}`)
	}
	tests := []struct {
		name, typ, resource string
		payment, note       string
		unmapped            bool
	}{
		{"Completed", "PAYMENT.CAPTURE.COMPLETED", `{"id":"CAP1","status":"COMPLETED"}`, "CAP1", "", false},
		{"OrderApprovedIsNotPaid", "CHECKOUT.ORDER.APPROVED", `{"id":"ORDER1","status":"APPROVED"}`, "", "", false},
		{"PendingIsNotPaid", "PAYMENT.CAPTURE.PENDING", `{"id":"CAP1","status":"PENDING"}`, "", "", false},
		{"CompletedTypeOtherStatus", "PAYMENT.CAPTURE.COMPLETED", `{"id":"CAP1","status":"DECLINED"}`, "", "not COMPLETED", false},
		{"NumericCaptureIsFlagged", "PAYMENT.CAPTURE.COMPLETED", `{"id":12,"status":"COMPLETED"}`, "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := event(tt.typ, tt.resource)
			ev, err := s.p.Verify(s.sign(t, body, payPalSandboxCert, payPalWebhook, "t-"+tt.name, now), body, now)
			if err != nil {
				t.Fatal(err)
			}
			if ev.PaymentID != tt.payment || !strings.Contains(ev.Note, tt.note) || (ev.Unmapped != "") != tt.unmapped {
				t.Errorf("payment %q note %q unmapped %q", ev.PaymentID, ev.Note, ev.Unmapped)
			}
			again, err := s.p.Map(ev.Type, ev.Payload)
			if err != nil || again.PaymentID != ev.PaymentID {
				t.Errorf("Map = %+v, %v", again, err)
			}
		})
	}
}

// TestPayPalReversals: refunds, reversals and disputes, each naming the
// capture PAYMENT.CAPTURE.COMPLETED named.
func TestPayPalReversals(t *testing.T) {
	t.Parallel()
	s := newPayPal(t, provider.ModeTest, nil)
	now := time.Now()
	refund := func(typ string) []byte {
		return []byte(`{"id":"WH-R-` + typ + `","event_type":"` + typ + `","resource_type":"refund","resource":{"id":"1Y107995YT783435V","status":"COMPLETED",` +
			`"amount":{"value":"2.51","currency_code":"USD"},"links":[{"href":"https://api.paypal.com/v2/payments/refunds/1Y107995YT783435V","rel":"self","method":"GET"},` +
			`{"href":"https://api.paypal.com/v2/payments/captures/27M47624FP291604U","rel":"up","method":"GET"}]}}`)
	}
	dispute := func(typ, outcome string) []byte {
		return []byte(`{"id":"WH-D-` + typ + outcome + `","event_type":"` + typ + `","resource_type":"dispute","resource":{"dispute_id":"PP-D-27803",` +
			`"disputed_transactions":[{"seller_transaction_id":"27M47624FP291604U"}],"dispute_outcome":{"outcome_code":"` + outcome + `"}}}`)
	}
	tests := []struct {
		name string
		body []byte
		want *provider.Reversal
	}{
		{"Refunded", refund("PAYMENT.CAPTURE.REFUNDED"), &provider.Reversal{PaymentID: "27M47624FP291604U", Kind: provider.Refund, RefundID: "1Y107995YT783435V", Amount: &provider.Money{Minor: 251, Currency: "USD"}}},
		{"Reversed", refund("PAYMENT.CAPTURE.REVERSED"), &provider.Reversal{PaymentID: "27M47624FP291604U", Kind: provider.Dispute, Stage: provider.DisputeLost}},
		{"DisputeOpened", dispute("CUSTOMER.DISPUTE.CREATED", ""), &provider.Reversal{PaymentID: "27M47624FP291604U", Kind: provider.Dispute, Stage: provider.DisputeOpened}},
		{"DisputeLost", dispute("CUSTOMER.DISPUTE.RESOLVED", "RESOLVED_BUYER_FAVOUR"), &provider.Reversal{PaymentID: "27M47624FP291604U", Kind: provider.Dispute, Stage: provider.DisputeLost}},
		{"DisputeWon", dispute("CUSTOMER.DISPUTE.RESOLVED", "RESOLVED_SELLER_FAVOUR"), &provider.Reversal{PaymentID: "27M47624FP291604U", Kind: provider.Dispute, Stage: provider.DisputeWon}},
		// ACCEPTED: the seller accepted the claim and the buyer was refunded.
		{"DisputeAcceptedIsLost", dispute("CUSTOMER.DISPUTE.RESOLVED", "ACCEPTED"), &provider.Reversal{PaymentID: "27M47624FP291604U", Kind: provider.Dispute, Stage: provider.DisputeLost}},
		{"DisputePaidOutIsLost", dispute("CUSTOMER.DISPUTE.RESOLVED", "RESOLVED_WITH_PAYOUT"), &provider.Reversal{PaymentID: "27M47624FP291604U", Kind: provider.Dispute, Stage: provider.DisputeLost}},
		{"DisputeDeniedIsWon", dispute("CUSTOMER.DISPUTE.RESOLVED", "DENIED"), &provider.Reversal{PaymentID: "27M47624FP291604U", Kind: provider.Dispute, Stage: provider.DisputeWon}},
		{"DisputeCancelledIsWon", dispute("CUSTOMER.DISPUTE.RESOLVED", "CANCELED_BY_BUYER"), &provider.Reversal{PaymentID: "27M47624FP291604U", Kind: provider.Dispute, Stage: provider.DisputeWon}},
		{"DisputeOutcomeNoneIsNeither", dispute("CUSTOMER.DISPUTE.RESOLVED", "NONE"), nil},
		{"OrderApproved", []byte(`{"id":"WH-A","event_type":"CHECKOUT.ORDER.APPROVED","resource":{"id":"ORDER1"}}`), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := s.p.Verify(s.sign(t, tt.body, payPalSandboxCert, payPalWebhook, "t-"+tt.name, now), tt.body, now)
			if err != nil {
				t.Fatal(err)
			}
			if (tt.want == nil) != (ev.Reversal == nil) || (tt.want != nil && !reflect.DeepEqual(tt.want, ev.Reversal)) || ev.Fulfils() {
				t.Errorf("reversal %+v, want %+v", ev.Reversal, tt.want)
			}
		})
	}
}

// TestPayPalFetchesAreBounded: anonymous requests naming certificates
// make at most a few fetches at once; the rest are answered
// ErrUnavailable at once, never held; a name not in PayPal's format is
// never fetched; a failure is answered from the cache.
func TestPayPalFetchesAreBounded(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var inFlight, most, fetches atomic.Int32
	var fetched sync.Map // the URLs that got past the bound
	p, err := provider.NewPayPal(provider.PayPalConfig{WebhookIDs: []string{payPalWebhook}, Fetch: func(ctx context.Context, url string) ([]byte, error) {
		fetches.Add(1)
		fetched.Store(url, true)
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		return nil, errors.New("no such certificate: " + provider.ErrSignature.Error())
	}})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := providertest.PayPalCertificate(t, "messageverificationcerts.paypal.com", time.Now().Add(-time.Hour))
	now := time.Now()
	body := []byte(`{"id":"WH-1","event_type":"PAYMENT.CAPTURE.COMPLETED"}`)
	const requests = 64
	var unavailable atomic.Int32
	var wg sync.WaitGroup
	for i := range requests {
		h, err := providertest.SignPayPal(body, key, fmt.Sprintf("https://api.paypal.com/v1/notifications/certs/CERT-%08x-00000000-00000000", i), payPalWebhook, "t1", now)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if _, err := p.Verify(h, body, now); errors.Is(err, provider.ErrUnavailable) {
				unavailable.Add(1)
			}
		})
	}
	// Every request beyond the bound is answered while the fetches hang.
	deadline := time.After(10 * time.Second)
	for unavailable.Load() < requests-4 {
		select {
		case <-deadline:
			t.Fatalf("%d of %d requests answered while %d fetches hang", unavailable.Load(), requests, inFlight.Load())
		case <-time.After(5 * time.Millisecond):
		}
	}
	close(release)
	wg.Wait()
	if most.Load() > 4 || fetches.Load() > 4 {
		t.Errorf("%d fetches, at most %d at once; want at most 4", fetches.Load(), most.Load())
	}
	// A failure is cached: a URL whose fetch failed, asked again, fetches
	// nothing. Which four got past the bound is the scheduler's choice.
	var failed string
	fetched.Range(func(url, _ any) bool { failed = url.(string); return false })
	if failed == "" {
		t.Fatal("no certificate was fetched")
	}
	before := fetches.Load()
	h, _ := providertest.SignPayPal(body, key, failed, payPalWebhook, "t1", now)
	for range 10 {
		_, _ = p.Verify(h, body, now)
	}
	if fetches.Load() != before {
		t.Errorf("a failed certificate was fetched again: %d fetches", fetches.Load()-before)
	}
	// Names not in PayPal's format are never fetched.
	for _, name := range []string{"CERT-1", "CERT-360CAA42-FCA2A594-1D93A270", "CERT-360caa42-fca2a594-1d93a27", "cert-360caa42-fca2a594-1d93a270", "CERT-360caa42-fca2a594-1d93a270-0"} {
		h, _ := providertest.SignPayPal(body, key, "https://api.paypal.com/v1/notifications/certs/"+name, payPalWebhook, "t1", now)
		if _, err := p.Verify(h, body, now); !errors.Is(err, provider.ErrSignature) {
			t.Errorf("%s: %v, want ErrSignature", name, err)
		}
	}
	if fetches.Load() != before {
		t.Errorf("a name not in PayPal's format was fetched")
	}
}

// TestPayPalConfirmsWithItsAPI: with PayPal's API at hand, a delivery that
// decides anything is read as PayPal's own copy of the event; a delivery
// that is not that event (another type under its id, an id PayPal does
// not know) is refused; PayPal's API down is 503; what decides nothing is
// not asked about.
func TestPayPalConfirmsWithItsAPI(t *testing.T) {
	t.Parallel()
	key, pemBytes := providertest.PayPalCertificate(t, "messageverificationcerts.paypal.com", time.Now().Add(-time.Hour))
	own := []byte(`{"id":"WH-CAP-1","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"id":"CAP1","status":"COMPLETED","amount":{"currency_code":"USD","value":"5.00"}}}`)
	var asked atomic.Int32
	p, err := provider.NewPayPal(provider.PayPalConfig{WebhookIDs: []string{payPalWebhook},
		Fetch: func(context.Context, string) ([]byte, error) { return pemBytes, nil },
		Event: func(_ context.Context, id string) ([]byte, error) {
			asked.Add(1)
			switch id {
			case "WH-CAP-1":
				return own, nil
			case "WH-DOWN":
				return nil, fmt.Errorf("%w: PayPal's API did not answer", provider.ErrUnavailable)
			}
			return nil, errors.New("paypal answered 404")
		}})
	if err != nil {
		t.Fatal(err)
	}
	verify := func(body string) (provider.Event, error) {
		now := time.Now()
		h, err := providertest.SignPayPal([]byte(body), key, payPalLiveCert, payPalWebhook, "t-"+body[:20], now)
		if err != nil {
			t.Fatal(err)
		}
		return p.Verify(h, []byte(body), now)
	}
	// The delivered body differs from PayPal's copy where it does not
	// decide the event's identity: PayPal's copy is what is kept.
	ev, err := verify(`{"id":"WH-CAP-1","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"id":"CAP1","status":"COMPLETED","custom_id":"attacker"}}`)
	if err != nil || ev.PaymentID != "CAP1" || string(ev.Payload) != string(own) || ev.Paid == nil || ev.Paid.Minor != 500 || ev.Transmission == nil {
		t.Errorf("a confirmed capture: %+v, %v; want PayPal's own copy", ev, err)
	}
	if _, err := verify(`{"id":"WH-CAP-1","event_type":"PAYMENT.CAPTURE.REFUNDED","resource":{"id":"R1","links":[{"rel":"up","href":"https://api.paypal.com/v2/payments/captures/CAP1"}]}}`); !errors.Is(err, provider.ErrSignature) {
		t.Errorf("another type under the event's id: %v, want ErrSignature", err)
	}
	if _, err := verify(`{"id":"WH-NOBODY","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"id":"CAP9","status":"COMPLETED"}}`); !errors.Is(err, provider.ErrSignature) {
		t.Errorf("an event PayPal does not know: %v, want ErrSignature", err)
	}
	if _, err := verify(`{"id":"WH-DOWN","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"id":"CAP9","status":"COMPLETED"}}`); !errors.Is(err, provider.ErrUnavailable) {
		t.Errorf("PayPal's API down: %v, want ErrUnavailable", err)
	}
	// A subscription's sale states one of its payments, which places a
	// refund: PayPal's copy decides it, never a delivered body (its CRC32
	// can be matched by a forged one).
	before := asked.Load()
	if _, err := verify(`{"id":"WH-SALE-FORGED","event_type":"PAYMENT.SALE.COMPLETED","resource":{"id":"S1","state":"completed","billing_agreement_id":"I-VICTIM"}}`); !errors.Is(err, provider.ErrSignature) || asked.Load() != before+1 {
		t.Errorf("a sale PayPal does not know: %v, %d asks; want it asked for and refused", err, asked.Load()-before)
	}
	before = asked.Load()
	if _, err := verify(`{"id":"WH-APPROVED","event_type":"CHECKOUT.ORDER.APPROVED","resource":{"id":"O1"}}`); err != nil || asked.Load() != before {
		t.Errorf("an event that decides nothing: %v, %d asks", err, asked.Load()-before)
	}
	if !p.Confirms() {
		t.Error("Confirms = false with an Event")
	}
}

// TestPayPalSubscriptionLife reads a subscription's life as PayPal's
// subscription webhooks describe it, signed as PayPal signs: its
// activation starts it (the purchase is the subscription), a suspension
// and each cycle's sale are no end, its cancellation or expiry ends it.
func TestPayPalSubscriptionLife(t *testing.T) {
	t.Parallel()
	s := newPayPal(t, provider.ModeTest, nil)
	now := time.Now()
	n := 0
	read := func(typ, resource string) provider.Event {
		t.Helper()
		n++
		body := []byte(fmt.Sprintf(`{"id":"WH-SUB-%d","event_type":%q,"resource_type":"subscription","resource":%s}`, n, typ, resource))
		ev, err := s.p.Verify(s.sign(t, body, payPalSandboxCert, payPalWebhook, fmt.Sprintf("t-sub-%d", n), now), body, now)
		require.NoError(t, err)
		return ev
	}
	require.Subset(t, provider.PayPalRuleTypes, []string{"BILLING.SUBSCRIPTION.ACTIVATED", "BILLING.SUBSCRIPTION.CANCELLED", "BILLING.SUBSCRIPTION.EXPIRED"})

	start := read("BILLING.SUBSCRIPTION.ACTIVATED", `{"id":"I-BW452GLLEP1G","plan_id":"P-5ML4271244454362WXNWU5NQ","status":"ACTIVE","custom_id":"course-go",
		"subscriber":{"email_address":"ana@example.com","payer_id":"2J6QB8YJQSJRJ"},
		"billing_info":{"last_payment":{"amount":{"currency_code":"USD","value":"10.00"},"time":"2026-12-01T00:00:00Z"}}}`)
	require.Equal(t, "I-BW452GLLEP1G", start.PaymentID)
	sub, pay := start.StartsSubscription()
	require.Equal(t, "I-BW452GLLEP1G", sub)
	require.Equal(t, "I-BW452GLLEP1G", pay)
	require.Equal(t, provider.SubscriptionStart, start.Purchase.Kind)
	require.Equal(t, int64(1000), *start.Purchase.Amount)
	require.Equal(t, "ana@example.com", start.Purchase.Customer.Email)
	require.Equal(t, "course-go", start.Purchase.Metadata["custom_id"])
	require.Equal(t, "I-BW452GLLEP1G", start.Resumes, "an activation says it is active: again after a suspension")

	suspended := read("BILLING.SUBSCRIPTION.SUSPENDED", `{"id":"I-BW452GLLEP1G","status":"SUSPENDED","status_update_time":"2026-12-02T09:00:00Z"}`)
	require.Equal(t, &provider.Reversal{Kind: provider.Suspension, Subscription: "I-BW452GLLEP1G", Standing: provider.Paused}, suspended.Reversal)
	require.Equal(t, time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC), suspended.StandingAt.UTC(), "its status_update_time, signed")

	for _, tt := range []struct{ typ, resource string }{
		{"BILLING.SUBSCRIPTION.ACTIVATED", `{"id":"I-BW452GLLEP1G","status":"APPROVAL_PENDING"}`},
		{"PAYMENT.SALE.COMPLETED", `{"id":"80021663DE681814L","state":"completed","billing_agreement_id":"I-BW452GLLEP1G","amount":{"total":"10.00","currency":"USD"}}`},
		{"BILLING.SUBSCRIPTION.CANCELLED", `{"id":"not-a-subscription","status":"CANCELLED"}`},
	} {
		ev := read(tt.typ, tt.resource)
		require.False(t, ev.Fulfils(), tt.typ)
		require.Nil(t, ev.Reversal, tt.typ)
		require.NotEmpty(t, ev.Note, tt.typ)
	}
	for _, tt := range []struct{ typ, status string }{{"BILLING.SUBSCRIPTION.CANCELLED", "CANCELLED"}, {"BILLING.SUBSCRIPTION.EXPIRED", "EXPIRED"}} {
		ev := read(tt.typ, `{"id":"I-BW452GLLEP1G","status":"`+tt.status+`"}`)
		require.Equal(t, &provider.Reversal{Kind: provider.End, Subscription: "I-BW452GLLEP1G"}, ev.Reversal, tt.typ)
	}
}

// TestPayPalRenewals reads a subscription's sales, as PayPal's
// subscription webhooks reference describes them (PayPal publishes no
// sample): with renewals fulfilling, each completed sale naming its
// subscription is a renewal of its own, the sale; a sale refunded or
// reversed names it back. Without, a sale is stored and fulfils nothing.
func TestPayPalRenewals(t *testing.T) {
	t.Parallel()
	on, err := provider.NewPayPal(provider.PayPalConfig{WebhookIDs: []string{payPalWebhook}, FulfilRenewals: true})
	require.NoError(t, err)
	off, err := provider.NewPayPal(provider.PayPalConfig{WebhookIDs: []string{payPalWebhook}})
	require.NoError(t, err)
	event := func(typ, resource string) []byte {
		return []byte(fmt.Sprintf(`{"id":"WH-SALE","event_type":%q,"resource_type":"sale","resource":%s}`, typ, resource))
	}
	sale := event("PAYMENT.SALE.COMPLETED", `{"id":"80021663DE681814L","state":"completed","billing_agreement_id":"I-BW452GLLEP1G","custom":"course-go","amount":{"total":"10.00","currency":"USD"}}`)
	ev, err := on.Map("PAYMENT.SALE.COMPLETED", sale)
	require.NoError(t, err)
	require.Equal(t, "80021663DE681814L", ev.PaymentID)
	require.Equal(t, provider.Renewal, ev.Purchase.Kind)
	require.Equal(t, &provider.Money{Minor: 1000, Currency: "USD"}, ev.Paid)
	require.Equal(t, "I-BW452GLLEP1G", ev.Purchase.Metadata["billing_agreement_id"])
	require.Equal(t, &provider.Invoice{ID: "80021663DE681814L", Payment: "80021663DE681814L", Subscription: "I-BW452GLLEP1G"}, ev.Invoice,
		"one of the subscription's payments, never the first: the sale does not say its cycle")
	ev, err = off.Map("PAYMENT.SALE.COMPLETED", sale)
	require.NoError(t, err)
	require.False(t, ev.Fulfils(), "renewals fulfil only when configured")
	require.NotEmpty(t, ev.Note)
	for _, resource := range []string{
		`{"id":"80021663DE681814L","state":"pending","billing_agreement_id":"I-BW452GLLEP1G"}`,
		`{"id":"80021663DE681814L","state":"completed"}`, // no subscription's
	} {
		ev, err = on.Map("PAYMENT.SALE.COMPLETED", event("PAYMENT.SALE.COMPLETED", resource))
		require.NoError(t, err)
		require.False(t, ev.Fulfils(), resource)
	}

	refund, err := on.Map("PAYMENT.SALE.REFUNDED", event("PAYMENT.SALE.REFUNDED",
		`{"id":"1K0NSJ9CT6HAGE","state":"completed","sale_id":"80021663DE681814L","amount":{"total":"10.00","currency":"USD"}}`))
	require.NoError(t, err)
	require.Equal(t, &provider.Reversal{PaymentID: "80021663DE681814L", Kind: provider.Refund, RefundID: "1K0NSJ9CT6HAGE",
		Amount: &provider.Money{Minor: 1000, Currency: "USD"}}, refund.Reversal)
	reversed, err := on.Map("PAYMENT.SALE.REVERSED", event("PAYMENT.SALE.REVERSED", `{"id":"7WX52145G1547512B","sale_id":"80021663DE681814L"}`))
	require.NoError(t, err)
	require.Equal(t, &provider.Reversal{PaymentID: "80021663DE681814L", Kind: provider.Dispute, Stage: provider.DisputeLost}, reversed.Reversal)
	require.Subset(t, provider.PayPalRuleTypes, []string{"PAYMENT.SALE.COMPLETED", "PAYMENT.SALE.REFUNDED", "PAYMENT.SALE.REVERSED"}, "a backfill lists them")
}
