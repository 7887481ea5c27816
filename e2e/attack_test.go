package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/db/dbtest"
)

// The attacker suite (docs/security.md): what an anonymous client, a
// careless operator and a proxy in front can do to the built binary, each
// control checked by its effect: status codes, rows, connector calls, logs.

// TestAttackRefusedConfigurations: configurations that would expose public
// secrets, weak secrets or debug endpoints do not start.
func TestAttackRefusedConfigurations(t *testing.T) {
	t.Parallel()
	production := []string{"GUARDIAN_STRIPE_SECRETS=" + stripeSecret, "GUARDIAN_STANDARD_SECRETS=" + standardSecret,
		"GUARDIAN_CONNECTOR_URL=http://127.0.0.1:1", "GUARDIAN_CONNECTOR_SECRET=" + connectorSecret}
	with := func(more ...string) []string { return append(append([]string{}, production...), more...) }
	tests := []struct {
		name string
		env  []string
		want string
	}{
		{"NoSecrets", []string{"GUARDIAN_CONNECTOR_URL=http://127.0.0.1:1", "GUARDIAN_CONNECTOR_SECRET=" + connectorSecret}, "GUARDIAN_STRIPE_SECRETS is empty"},
		{"EmptySecrets", []string{"GUARDIAN_STRIPE_SECRETS= , ", "GUARDIAN_STANDARD_SECRETS=" + standardSecret, "GUARDIAN_CONNECTOR_URL=http://127.0.0.1:1", "GUARDIAN_CONNECTOR_SECRET=" + connectorSecret}, "GUARDIAN_STRIPE_SECRETS is empty"},
		{"NoConnector", []string{"GUARDIAN_STRIPE_SECRETS=" + stripeSecret, "GUARDIAN_STANDARD_SECRETS=" + standardSecret}, "GUARDIAN_CONNECTOR_URL is empty"},
		// docker-compose.yml plus a connector and Stripe secrets, but no
		// Standard secret: the development profile would sign for anyone.
		{"DevProfileWithARealConnector", []string{"GUARDIAN_DEV=1", "GUARDIAN_ADDR=127.0.0.1:0", "GUARDIAN_STRIPE_SECRETS=" + stripeSecret,
			"GUARDIAN_CONNECTOR_URL=http://127.0.0.1:1", "GUARDIAN_CONNECTOR_SECRET=" + connectorSecret}, "GUARDIAN_DEV=1 refuses GUARDIAN_CONNECTOR_URL"},
		{"DevProfileOnAllInterfaces", []string{"GUARDIAN_DEV=1", "GUARDIAN_ADDR=:8080"}, "listens on loopback only"},
		{"PublicStandardSecret", with("GUARDIAN_STANDARD_SECRETS=" + provider.DevStandardSecret), "public development constant"},
		{"PublicAdminToken", with("GUARDIAN_ADMIN_TOKEN=dev-admin-token"), "public development constant"},
		{"WeakConnectorSecret", with("GUARDIAN_CONNECTOR_SECRET=whsec_c2hvcnQ="), "at least 24 random bytes"},
		{"WeakStripeSecret", with("GUARDIAN_STRIPE_SECRETS=whsec_123"), "at least 24 characters"},
		{"PprofOnAPublicAddress", with("GUARDIAN_PPROF=true", "GUARDIAN_METRICS_ADDR=0.0.0.0:9090"), "GUARDIAN_PPROF refuses"},
		{"MetricsOnThePublicListener", with("GUARDIAN_METRICS_ADDR=127.0.0.1:0"), "never served on the public listener"},
	}
	for _, tt := range tests {
		cmd := exec.Command(binary, "serve")
		cmd.Env = append([]string{"GUARDIAN_ADDR=127.0.0.1:0", "DATABASE_URL=postgres://127.0.0.1:1/none"}, tt.env...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, tt.name)
		require.Equal(t, 2, exit.ExitCode(), "%s: %s", tt.name, out)
		require.Contains(t, string(out), tt.want, tt.name)
		for _, secret := range []string{stripeSecret, connectorSecret, standardSecret, provider.DevStandardSecret} {
			require.NotContains(t, string(out), secret, "%s: the refusal quotes a secret", tt.name)
		}
	}
}

// TestAttackComposeFilePublishesOnLoopback: every port docker-compose.yml
// publishes is bound to 127.0.0.1.
func TestAttackComposeFilePublishesOnLoopback(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docker-compose.yml")
	require.NoError(t, err)
	ports := regexp.MustCompile(`(?m)^\s*ports:\s*\[(.*)\]`).FindAllStringSubmatch(string(raw), -1)
	require.NotEmpty(t, ports)
	for _, p := range ports {
		for _, mapping := range strings.Split(p[1], ",") {
			require.True(t, strings.HasPrefix(strings.Trim(strings.TrimSpace(mapping), `"`), "127.0.0.1:"), "published beyond loopback: %s", mapping)
		}
	}
	require.NotContains(t, string(raw), "GUARDIAN_DEV", "compose runs no development profile")
}

// attackClient is an anonymous client with a cookie jar.
type attackClient struct {
	t    *testing.T
	g    *guardian
	http *http.Client
}

func newAttackClient(t *testing.T, g *guardian) *attackClient {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &attackClient{t: t, g: g, http: &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (a *attackClient) do(method, path string, header http.Header, body []byte) (int, http.Header, string) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.g.url+path, bytes.NewReader(body))
	require.NoError(a.t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := a.http.Do(req)
	require.NoError(a.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func form(v url.Values, more ...string) (http.Header, []byte) {
	h := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}
	for i := 0; i+1 < len(more); i += 2 {
		h.Set(more[i], more[i+1])
	}
	return h, []byte(v.Encode())
}

var (
	attackCSRF  = regexp.MustCompile(`name="_csrf" value="([^"]+)"`)
	attackToken = regexp.MustCompile(`name="token" value="([^"]+)"`)
)

func match(re *regexp.Regexp, s string) string {
	if m := re.FindStringSubmatch(s); m != nil {
		return m[1]
	}
	return ""
}

// signIn signs a in with token through the form, as a browser on the
// server's own origin does.
func (a *attackClient) signIn(token string) int {
	_, _, page := a.do("GET", "/login", nil, nil)
	h, body := form(url.Values{"_csrf": {match(attackCSRF, page)}, "token": {token}}, "Origin", a.g.url)
	code, _, _ := a.do("POST", "/login", h, body)
	return code
}

// TestAttackPublicListener runs the anonymous attacks against one process,
// in an order that keeps each throttle's state meaningful: the address's
// sign-in budget is spent last.
func TestAttackPublicListener(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	conn := newFakeConnector(t)
	conn.fail = "pi_parked"
	g := start(t, baseEnv(t, d, conn))
	ana := addOperator(t, d, "ana")
	anon := newAttackClient(t, g)
	events := func() int { return d.Count(t, `SELECT count(*) FROM webhook_event`) }

	t.Run("Webhooks", func(t *testing.T) {
		now := time.Now()
		paid := func(id string) []byte {
			return fmt.Appendf(nil, `{"id":"evt_%s","object":"event","type":"checkout.session.completed","data":{"object":{"id":"cs_%s","object":"checkout.session","payment_status":"paid","payment_intent":"pi_%s"}}}`, id, id, id)
		}
		// Just over the 1 MiB cap, so the server reads to the cap and the
		// rest fits what it discards before answering.
		big := bytes.Repeat([]byte(" "), 1<<20+1024)
		real := paid("real")
		realSig := providertest.SignStripe(real, stripeSecret, now)
		tampered := bytes.Replace(real, []byte("pi_real"), []byte("pi_evil"), 1)
		standardBody := []byte(`{"type":"payment.succeeded","data":{"payment_id":"pay_std"}}`)
		stdHeader, err := providertest.SignStandard("msg_std", standardBody, standardSecret, now.Add(-10*time.Minute))
		require.NoError(t, err)
		for _, tc := range []struct {
			name   string
			header http.Header
			body   []byte
			want   int
		}{
			{"Forged", providertest.SignStripe(paid("forged"), "whsec_attacker_made_this_up_0123456789", now), paid("forged"), http.StatusBadRequest},
			{"Unsigned", http.Header{"Content-Type": {"application/json"}}, paid("unsigned"), http.StatusBadRequest},
			{"TamperedAfterSigning", realSig, tampered, http.StatusBadRequest},
			{"Stale", providertest.SignStripe(paid("stale"), stripeSecret, now.Add(-10*time.Minute)), paid("stale"), http.StatusBadRequest},
			{"FromTheFuture", providertest.SignStripe(paid("future"), stripeSecret, now.Add(10*time.Minute)), paid("future"), http.StatusBadRequest},
			{"StaleStandard", stdHeader, standardBody, http.StatusBadRequest},
			{"Oversize", providertest.SignStripe(big, stripeSecret, now), big, http.StatusRequestEntityTooLarge},
			{"MalformedButSigned", providertest.SignStripe([]byte(`{"id":"evt_x",`), stripeSecret, now), []byte(`{"id":"evt_x",`), http.StatusBadRequest},
			{"DuplicateKeysButSigned", providertest.SignStripe([]byte(`{"id":"evt_d","id":"evt_e","type":"customer.created","data":{"object":{}}}`), stripeSecret, now), []byte(`{"id":"evt_d","id":"evt_e","type":"customer.created","data":{"object":{}}}`), http.StatusBadRequest},
			{"UnknownProvider", realSig, real, http.StatusNotFound},
		} {
			path := "/webhooks/stripe"
			if strings.HasPrefix(tc.name, "StaleStandard") {
				path = "/webhooks/standard"
			}
			if tc.name == "UnknownProvider" {
				path = "/webhooks/paypal"
			}
			code, _, _ := anon.do("POST", path, tc.header, tc.body)
			require.Equal(t, tc.want, code, tc.name)
		}
		require.Zero(t, events(), "no refused delivery stored anything")

		// A replay of a real delivery is a duplicate: one fulfilment, one call.
		for range 3 {
			code, _, _ := anon.do("POST", "/webhooks/stripe", realSig, real)
			require.Equal(t, http.StatusOK, code)
		}
		require.Eventually(t, func() bool { return stateCount(t, d, "fulfilled") == 1 }, 15*time.Second, 20*time.Millisecond)
		require.Equal(t, 1, events())
		require.Len(t, conn.snapshot(), 1, "the connector saw one payment")
	})

	t.Run("Slowloris", func(t *testing.T) {
		// 40 connections that send headers a byte at a time hold no
		// database connection and do not stop a real delivery; the server
		// drops them once ReadHeaderTimeout (10 s) passes.
		var conns []net.Conn
		for range 40 {
			c, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
			require.NoError(t, err)
			_, err = c.Write([]byte("POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nX-Slow: "))
			require.NoError(t, err)
			conns = append(conns, c)
		}
		body := []byte(`{"id":"evt_during_slowloris","object":"event","type":"customer.created","data":{"object":{"id":"cus_1"}}}`)
		code, _, _ := anon.do("POST", "/webhooks/stripe", providertest.SignStripe(body, stripeSecret, time.Now()), body)
		require.Equal(t, http.StatusOK, code, "a delivery gets through while slow clients hold connections")
		var wg sync.WaitGroup
		closed := make([]bool, len(conns))
		for i, c := range conns {
			wg.Go(func() {
				_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
				_, err := bufio.NewReader(c).ReadByte()
				closed[i] = err == io.EOF || err == nil // closed, or answered 408 and closed
				_ = c.Close()
			})
		}
		wg.Wait()
		for i, ok := range closed {
			require.True(t, ok, "slow connection %d was still open after 20 s", i)
		}
	})

	t.Run("EveryOperatorRouteRefusesAnonymously", func(t *testing.T) {
		for _, r := range []struct{ method, path string }{
			{"GET", "/api/v1/fulfilments"}, {"GET", "/api/v1/stats"}, {"POST", "/api/v1/fulfilments/0b6f3c38-8a7e-4a57-9d0e-2d1f4f6a4b11/resolve"},
			{"POST", "/api/v1/events/stripe/evt_real/replay"}, {"POST", "/api/v1/tokens"}, {"GET", "/api/v1/nonexistent"},
			{"GET", "/riverui/"}, {"GET", "/riverui/api/jobs?state=available"}, {"POST", "/riverui/api/jobs/cancel"},
		} {
			code, _, _ := anon.do(r.method, r.path, nil, nil)
			require.Equal(t, http.StatusUnauthorized, code, "%s %s", r.method, r.path)
		}
		for _, p := range []string{"/", "/queue", "/search?q=pi_real", "/events/stripe/evt_real"} {
			code, h, _ := anon.do("GET", p, nil, nil)
			require.Equal(t, http.StatusSeeOther, code, p)
			require.Equal(t, "/login", h.Get("Location"))
		}
		for _, p := range []string{"/metrics", "/debug/pprof/", "/debug/pprof/cmdline"} {
			code, _, _ := anon.do("GET", p, nil, nil)
			require.Equal(t, http.StatusNotFound, code, "%s is not on the public listener", p)
		}
	})

	t.Run("FormsAreCappedBeforeTheyAreRead", func(t *testing.T) {
		var mp bytes.Buffer
		w := multipart.NewWriter(&mp)
		fw, err := w.CreateFormFile("token", "spill.bin")
		require.NoError(t, err)
		_, _ = fw.Write(bytes.Repeat([]byte("x"), 8<<20))
		require.NoError(t, w.Close())
		code, _, _ := anon.do("POST", "/login", http.Header{"Content-Type": {w.FormDataContentType()}}, mp.Bytes())
		require.Equal(t, http.StatusUnsupportedMediaType, code)
		h, body := form(url.Values{"token": {strings.Repeat("x", 1<<20)}})
		code, _, _ = anon.do("POST", "/login", h, body)
		require.Equal(t, http.StatusRequestEntityTooLarge, code)
	})

	// Park one payment for the dashboard's attacks.
	parkedBody := []byte(`{"id":"evt_parked","object":"event","type":"checkout.session.completed","data":{"object":{"id":"cs_parked","object":"checkout.session","payment_status":"paid","payment_intent":"pi_parked"}}}`)
	code, _, _ := anon.do("POST", "/webhooks/stripe", providertest.SignStripe(parkedBody, stripeSecret, time.Now()), parkedBody)
	require.Equal(t, http.StatusOK, code)
	require.Eventually(t, func() bool { return stateCount(t, d, "needs_reconciliation") == 1 }, 15*time.Second, 20*time.Millisecond)
	parkedID := ""
	require.NoError(t, d.Pool.QueryRow(context.Background(), `SELECT id FROM fulfilment WHERE payment_id = 'pi_parked'`).Scan(&parkedID))

	t.Run("CrossSiteRequests", func(t *testing.T) {
		op := newAttackClient(t, g)
		require.Equal(t, http.StatusSeeOther, op.signIn(ana))
		_, _, page := op.do("GET", "/fulfilments/"+parkedID, nil, nil)
		csrf := match(attackCSRF, page)
		require.NotEmpty(t, csrf)
		resolve := url.Values{"_csrf": {csrf}, "attempt": {"1"}, "resolution": {"cancelled"}, "reason": {"attacker"}}

		// Another origin, with the victim's cookies (a browser would not send
		// SameSite=Strict ones; the origin check stands even if it did).
		h, body := form(resolve, "Origin", "https://evil.example")
		code, _, _ := op.do("POST", "/fulfilments/"+parkedID+"/resolve", h, body)
		require.Equal(t, http.StatusForbidden, code)
		// This origin without the session's form token.
		h, body = form(url.Values{"attempt": {"1"}, "resolution": {"cancelled"}, "reason": {"attacker"}}, "Origin", g.url)
		code, _, _ = op.do("POST", "/fulfilments/"+parkedID+"/resolve", h, body)
		require.Equal(t, http.StatusForbidden, code)
		// River UI on the session: a state change from another origin.
		code, _, _ = op.do("POST", "/riverui/api/jobs/cancel", http.Header{"Origin": {"https://evil.example"}, "Content-Type": {"application/json"}}, []byte(`{"job_ids":["1"]}`))
		require.Equal(t, http.StatusForbidden, code)
		code, h, _ = op.do("GET", "/riverui/", nil, nil)
		require.Equal(t, http.StatusOK, code, "River UI opens on the session")
		require.Contains(t, h.Get("Content-Security-Policy"), "frame-ancestors 'none'")
		require.Equal(t, "needs_reconciliation", string(d.Fulfilment(t, parkedID).State), "nothing changed")
	})

	t.Run("ConfirmationTokensAreNotPublic", func(t *testing.T) {
		op := newAttackClient(t, g)
		require.Equal(t, http.StatusSeeOther, op.signIn(ana))
		_, _, page := op.do("GET", "/fulfilments/"+parkedID, nil, nil)
		h, body := form(url.Values{"_csrf": {match(attackCSRF, page)}, "attempt": {"1"}, "resolution": {"fulfilled"},
			"reason": {"receiver confirmed"}, "evidence": {"ledger 77"}}, "Origin", g.url)
		code, _, confirm := op.do("POST", "/fulfilments/"+parkedID+"/resolve", h, body)
		require.Equal(t, http.StatusOK, code)
		token := match(attackToken, confirm)
		require.NotEmpty(t, token)
		// Someone who sees the confirmation token tries the public endpoint:
		// it is not found there, and not burned.
		code, _, _ = anon.do("POST", "/tokens/"+token+"/redeem", nil, nil)
		require.Equal(t, http.StatusGone, code)
		h, body = form(url.Values{"_csrf": {match(attackCSRF, confirm)}, "token": {token}}, "Origin", g.url)
		code, _, _ = op.do("POST", "/fulfilments/"+parkedID+"/resolve/confirm", h, body)
		require.Equal(t, http.StatusSeeOther, code, "the operator's confirmation still works")
		require.Equal(t, "fulfilled", string(d.Fulfilment(t, parkedID).State))
		require.Equal(t, 1, d.Count(t, `SELECT count(*) FROM fulfilment_transition WHERE fulfilment_id = $1 AND actor = 'operator ana'`, parkedID))
		require.NotContains(t, g.logs(), token, "the token was not logged")
		require.Contains(t, g.logs(), "/tokens/[redacted]/redeem")
	})

	t.Run("RedeemEnumerationIsThrottled", func(t *testing.T) {
		gone, throttled := 0, 0
		for i := range 40 {
			code, _, _ := anon.do("POST", fmt.Sprintf("/tokens/guess%040d/redeem", i), nil, nil)
			switch code {
			case http.StatusGone:
				gone++
			case http.StatusTooManyRequests:
				throttled++
			default:
				t.Fatalf("redeem answered %d", code)
			}
		}
		require.Positive(t, throttled, "guessing is throttled")
		require.LessOrEqual(t, gone, 30, "at most the burst is tried")
	})

	t.Run("SignInBruteForceIsThrottled", func(t *testing.T) {
		spoofer := newAttackClient(t, g)
		refused, throttled := 0, 0
		for i := range 15 {
			_, _, page := spoofer.do("GET", "/login", nil, nil)
			// A new X-Forwarded-For on every try: no proxy is trusted, so it
			// is ignored.
			h, body := form(url.Values{"_csrf": {match(attackCSRF, page)}, "token": {fmt.Sprintf("gop_guess_%d", i)}},
				"Origin", g.url, "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i))
			code, hdr, _ := spoofer.do("POST", "/login", h, body)
			switch code {
			case http.StatusUnauthorized:
				refused++
			case http.StatusTooManyRequests:
				throttled++
				require.NotEmpty(t, hdr.Get("Retry-After"))
			default:
				t.Fatalf("sign-in answered %d", code)
			}
		}
		require.Equal(t, 10, refused, "ten tries")
		require.Equal(t, 5, throttled, "then 429")
		code, _, _ := anon.do("GET", "/api/v1/stats", http.Header{"Authorization": {"Bearer " + ana}}, nil)
		require.Equal(t, http.StatusTooManyRequests, code, "bearer tokens share the address's budget")
	})

	for _, secret := range []string{stripeSecret, standardSecret, connectorSecret, adminToken, ana} {
		require.NotContains(t, g.logs(), secret, "a secret reached the logs")
	}
}

// TestAttackBehindATLSProxy: with GUARDIAN_PUBLIC_URL on https, cookies are
// Secure and host-bound, HSTS is sent, and the origin check includes the
// scheme.
func TestAttackBehindATLSProxy(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	e := baseEnv(t, d, newFakeConnector(t))
	e["GUARDIAN_PUBLIC_URL"] = "https://guardian.example.com"
	g := start(t, e)
	ana := addOperator(t, d, "ana")
	c := newAttackClient(t, g)
	code, h, page := c.do("GET", "/login", nil, nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, h.Get("Strict-Transport-Security"), "max-age=")
	cookies := (&http.Response{Header: h}).Cookies()
	require.Len(t, cookies, 1)
	require.Equal(t, "__Host-guardian_login_csrf", cookies[0].Name)
	require.True(t, cookies[0].Secure)
	csrf := match(attackCSRF, page)
	hdr, body := form(url.Values{"_csrf": {csrf}, "token": {ana}}, "Origin", "http://guardian.example.com", "Cookie", cookies[0].Name+"="+cookies[0].Value)
	code, _, _ = c.do("POST", "/login", hdr, body)
	require.Equal(t, http.StatusForbidden, code, "http:// is another origin")
	hdr.Set("Origin", "https://guardian.example.com")
	code, h, _ = c.do("POST", "/login", hdr, body)
	require.Equal(t, http.StatusSeeOther, code)
	session := (&http.Response{Header: h}).Cookies()
	require.Len(t, session, 1)
	require.Equal(t, "__Host-guardian_session", session[0].Name)
	require.True(t, session[0].Secure && session[0].HttpOnly)
}
