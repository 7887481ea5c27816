package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/logtest"
	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/web"
)

// do sends a request with extra headers and returns the status and headers.
func (b *testBundle) do(t *testing.T, method, path string, header http.Header, body []byte) (int, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, bytes.NewReader(body))
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

func bearer(token string, more ...string) http.Header {
	h := http.Header{"Authorization": {"Bearer " + token}}
	for i := 0; i+1 < len(more); i += 2 {
		h.Set(more[i], more[i+1])
	}
	return h
}

func TestThrottlesFailedCredentials(t *testing.T) {
	t.Parallel()

	t.Run("BearerTokens", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		for i := range 10 {
			code, _ := b.do(t, "GET", "/api/v1/stats", bearer("guess-"+string(rune('a'+i))), nil)
			require.Equal(t, http.StatusUnauthorized, code, "failure %d", i+1)
		}
		code, h := b.do(t, "GET", "/api/v1/stats", bearer("guess-k"), nil)
		require.Equal(t, http.StatusTooManyRequests, code)
		require.NotEmpty(t, h.Get("Retry-After"))
		code, _ = b.do(t, "GET", "/api/v1/stats", bearer(b.token), nil)
		require.Equal(t, http.StatusTooManyRequests, code, "the address is throttled before any token is checked")
	})

	t.Run("SignInFromAnyAddressHeaderIsOneClient", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		// No trusted proxy: X-Forwarded-For is the client's own claim, and
		// changing it on every try does not make a new client.
		for i := range 10 {
			code, _ := b.do(t, "GET", "/api/v1/stats", bearer("guess", "X-Forwarded-For", "203.0.113."+string(rune('1'+i))), nil)
			require.Equal(t, http.StatusUnauthorized, code)
		}
		code, _ := b.do(t, "GET", "/api/v1/stats", bearer("guess", "X-Forwarded-For", "198.51.100.7"), nil)
		require.Equal(t, http.StatusTooManyRequests, code)

		op := newBrowser(t, b)
		code, body := op.signIn(b.token)
		require.Equal(t, http.StatusTooManyRequests, code, "sign-in shares the throttle")
		require.Contains(t, body, "Too many failed sign-ins")
	})

	t.Run("DashboardSignIn", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		op := newBrowser(t, b)
		for range 10 {
			code, _ := op.signIn("gop_guess")
			require.Equal(t, http.StatusUnauthorized, code)
		}
		code, _ := op.signIn(b.token)
		require.Equal(t, http.StatusTooManyRequests, code)
		code, _, _ = op.get("/")
		require.Equal(t, http.StatusSeeOther, code, "no session was made")
	})

	t.Run("BehindATrustedProxyEachClientCounts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{trustedProxies: []string{"127.0.0.1"}})
		for i := range 10 {
			code, _ := b.do(t, "GET", "/api/v1/stats", bearer("guess", "X-Forwarded-For", "203.0.113.9"), nil)
			require.Equal(t, http.StatusUnauthorized, code, "failure %d", i+1)
		}
		code, _ := b.do(t, "GET", "/api/v1/stats", bearer("guess", "X-Forwarded-For", "203.0.113.9"), nil)
		require.Equal(t, http.StatusTooManyRequests, code, "the forwarded client is throttled")
		code, _ = b.do(t, "GET", "/api/v1/stats", bearer(b.token, "X-Forwarded-For", "203.0.113.10"), nil)
		require.Equal(t, http.StatusOK, code, "another client behind the same proxy is not")
	})

	t.Run("Redeems", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		for range 30 {
			code, _ := b.do(t, "POST", "/tokens/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA/redeem", nil, nil)
			require.Equal(t, http.StatusGone, code)
		}
		code, _ := b.do(t, "POST", "/tokens/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA/redeem", nil, nil)
		require.Equal(t, http.StatusTooManyRequests, code)
	})
}

func TestFormsAreCappedBeforeTheyAreRead(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})

	var mp bytes.Buffer
	w := multipart.NewWriter(&mp)
	fw, err := w.CreateFormFile("token", "big.bin")
	require.NoError(t, err)
	_, _ = fw.Write(bytes.Repeat([]byte("x"), 1<<20))
	require.NoError(t, w.Close())
	code, _ := b.do(t, "POST", "/login", http.Header{"Content-Type": {w.FormDataContentType()}}, mp.Bytes())
	require.Equal(t, http.StatusUnsupportedMediaType, code, "multipart is refused unread")

	big := "token=" + strings.Repeat("x", 100<<10)
	code, _ = b.do(t, "POST", "/login", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, []byte(big))
	require.Equal(t, http.StatusRequestEntityTooLarge, code)

	code, _ = b.do(t, "POST", "/login", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "Origin": {"https://evil.example"}}, []byte("token=x"))
	require.Equal(t, http.StatusForbidden, code, "a sign-in form posted from another origin")
}

func TestBehindATLSProxy(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{publicURL: "https://guardian.example.com"})
	op := newBrowser(t, b)
	// The test server is plain HTTP, as Guardian is behind a TLS proxy: the
	// cookie jar would not send Secure cookies over it, so read them raw.
	_, _, h := op.get("/login")
	require.Equal(t, "max-age=63072000; includeSubDomains", h.Get("Strict-Transport-Security"))
	cookies := (&http.Response{Header: h}).Cookies()
	require.Len(t, cookies, 1)
	require.Equal(t, "__Host-guardian_login_csrf", cookies[0].Name)
	require.True(t, cookies[0].Secure)
	require.Equal(t, "/", cookies[0].Path)

	form := url.Values{"_csrf": {cookies[0].Value}, "token": {b.token}}.Encode()
	post := func(origin string, extra ...*http.Cookie) (int, http.Header) {
		req, err := http.NewRequest("POST", b.srv.URL+"/login", strings.NewReader(form))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		for _, c := range append([]*http.Cookie{cookies[0]}, extra...) {
			req.AddCookie(c)
		}
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	code, _ := post("http://guardian.example.com")
	require.Equal(t, http.StatusForbidden, code, "the scheme is part of the origin")
	code, h = post("https://guardian.example.com")
	require.Equal(t, http.StatusSeeOther, code)
	session := (&http.Response{Header: h}).Cookies()
	require.Len(t, session, 1)
	require.Equal(t, "__Host-guardian_session", session[0].Name)
	require.True(t, session[0].Secure && session[0].HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, session[0].SameSite)

	// River UI on that session: a state change from http:// is refused.
	req, err := http.NewRequest("POST", b.srv.URL+"/riverui/api/jobs/cancel", strings.NewReader(`{"job_ids":["1"]}`))
	require.NoError(t, err)
	req.Header.Set("Origin", "http://guardian.example.com")
	req.AddCookie(session[0])
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
}

func TestRiverUIHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	code, h := b.do(t, "GET", "/riverui/", bearer(b.token), nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, h.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	require.Contains(t, h.Get("Content-Security-Policy"), "script-src 'self'")
	require.Equal(t, "DENY", h.Get("X-Frame-Options"))
	code, _ = b.do(t, "GET", "/riverui/", nil, nil)
	require.Equal(t, http.StatusUnauthorized, code)
}

func TestRedemptionTokensStayOutOfLogs(t *testing.T) {
	t.Parallel()
	var logs logtest.Buffer
	b := setup(t, setupOpts{logs: &logs})
	const secret = "c2VjcmV0LXRva2VuLXRoYXQtbXVzdC1ub3QtYmUtbG9nZ2Vk"
	code, _ := b.do(t, "POST", "/tokens/"+secret+"/redeem", nil, nil)
	require.Equal(t, http.StatusGone, code)
	code, _ = b.do(t, "POST", "/tokens/"+secret, nil, nil)
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, logs.String(), "/tokens/[redacted]/redeem", "the failure is logged")
	require.NotContains(t, logs.String(), secret)
}

func TestOperatorCredentials(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{answer: unknownFirst()})
	ctx := context.Background()
	boToken, _, err := b.operators.Add(ctx, "bo")
	require.NoError(t, err)

	t.Run("TheAuditActorIsTheCredentials", func(t *testing.T) {
		id := b.parked(t, "evt_1", "pi_1")
		code, body := b.api(t, "POST", "/api/v1/fulfilments/"+id+"/resolve", boToken, web.ResolveRequest{Attempt: 1, Resolution: "cancelled", Reason: "refunded"})
		require.Equal(t, http.StatusOK, code, string(body))
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment_transition WHERE fulfilment_id = $1 AND actor = 'operator bo'`, id))

		id = b.parked(t, "evt_2", "pi_2")
		code, _ = b.api(t, "POST", "/api/v1/fulfilments/"+id+"/resolve", adminToken, web.ResolveRequest{Attempt: 1, Resolution: "cancelled", Reason: "refunded"})
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment_transition WHERE fulfilment_id = $1 AND actor = 'operator admin-token'`, id),
			"an environment token names no one, and says so")
		require.Equal(t, state.Cancelled, b.db.Fulfilment(t, id).State)
	})

	t.Run("RotationRevocationAndSignOut", func(t *testing.T) {
		op := newBrowser(t, b)
		code, _ := op.signIn(boToken)
		require.Equal(t, http.StatusSeeOther, code)
		code, body, _ := op.get("/")
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, "bo")

		// Rotate: a second credential for bo, then revoke the first by id.
		newToken, cred, err := b.operators.Add(ctx, "bo")
		require.NoError(t, err)
		creds, err := b.operators.List(ctx)
		require.NoError(t, err)
		var oldID int64
		for _, c := range creds {
			if c.Operator == "bo" && c.ID != cred.ID {
				oldID = c.ID
			}
		}
		n, err := b.operators.Revoke(ctx, "bo", oldID)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)

		code, _ = b.api(t, "GET", "/api/v1/stats", boToken, nil)
		require.Equal(t, http.StatusUnauthorized, code, "the revoked credential")
		code, _, _ = op.get("/")
		require.Equal(t, http.StatusSeeOther, code, "its session ended at the next request")
		code, _ = b.api(t, "GET", "/api/v1/stats", newToken, nil)
		require.Equal(t, http.StatusOK, code, "the new credential works: no gap")
		code, _ = b.api(t, "GET", "/api/v1/stats", b.token, nil)
		require.Equal(t, http.StatusOK, code, "other operators are untouched")

		// Sign-out: sessions end, the credential stays.
		op2 := newBrowser(t, b)
		code, _ = op2.signIn(newToken)
		require.Equal(t, http.StatusSeeOther, code)
		_, err = b.operators.EndSessions(ctx, "bo")
		require.NoError(t, err)
		code, _, _ = op2.get("/")
		require.Equal(t, http.StatusSeeOther, code, "signed out everywhere")
		code, _ = b.api(t, "GET", "/api/v1/stats", newToken, nil)
		require.Equal(t, http.StatusOK, code)
		code, _ = op2.signIn(newToken)
		require.Equal(t, http.StatusSeeOther, code)
		code, _, _ = op2.get("/")
		require.Equal(t, http.StatusOK, code, "and may sign in again")
	})
}

func TestRefusedRequestsAreRecordedWithoutTheirContent(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	now := time.Now()
	body := []byte(`{"id":"evt_refused_secret_id","type":"checkout.session.completed","data":{"object":{"id":"cs_1","payment_status":"paid","payment_intent":"pi_refused"}}}`)
	for _, tc := range []struct {
		path   string
		header http.Header
		body   []byte
		want   int
	}{
		{"/webhooks/stripe", providertest.SignStripe(body, "whsec_someone_else_entirely_0123456789", now), body, http.StatusBadRequest},
		{"/webhooks/stripe", providertest.SignStripe(body, stripeSecret, now.Add(-time.Hour)), body, http.StatusBadRequest},
		{"/webhooks/stripe", providertest.SignStripe([]byte(`{"id":`), stripeSecret, now), []byte(`{"id":`), http.StatusBadRequest},
		{"/webhooks/stripe", providertest.SignStripe(bytes.Repeat([]byte(" "), 70<<10), stripeSecret, now), bytes.Repeat([]byte(" "), 70<<10), http.StatusRequestEntityTooLarge},
		{"/webhooks/mollie", providertest.SignStripe(body, stripeSecret, now), body, http.StatusNotFound},
	} {
		code, _ := b.do(t, "POST", tc.path, tc.header, tc.body)
		require.Equal(t, tc.want, code, tc.path)
	}
	require.Eventually(t, func() bool { return b.db.Count(t, `SELECT count(*) FROM refused_delivery`) == 5 }, 5*time.Second, 20*time.Millisecond)
	require.Equal(t, 5, b.db.Count(t, `SELECT count(DISTINCT reason) FROM refused_delivery`))
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM refused_delivery WHERE reason = 'unknown_provider' AND provider = 'unknown'`))
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM refused_delivery r WHERE r::text LIKE '%evt_refused_secret_id%' OR r::text LIKE '%pi_refused%'`),
		"nothing the sender wrote is stored")
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM webhook_event`))

	code, raw := b.api(t, "GET", "/api/v1/refused?limit=2", b.token, nil)
	require.Equal(t, http.StatusOK, code)
	var list web.RefusalList
	require.NoError(t, json.Unmarshal(raw, &list))
	require.Len(t, list.Refused, 2)
	require.EqualValues(t, "unknown_provider", list.Refused[0].Reason, "newest first")
	require.NotZero(t, list.NextBefore)
	code, _ = b.api(t, "GET", "/api/v1/refused", "", nil)
	require.Equal(t, http.StatusUnauthorized, code)

	op := newBrowser(t, b)
	op.signIn(b.token)
	code, page, _ := op.get("/refused")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "bad signature")
	require.Contains(t, page, "too_large")
}
