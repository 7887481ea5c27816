package web_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/web"
)

// browser is an HTTP client with cookies, like a signed-in operator.
type browser struct {
	t    *testing.T
	b    *testBundle
	http *http.Client
}

func newBrowser(t *testing.T, b *testBundle) *browser {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &browser{t: t, b: b, http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (br *browser) get(path string) (int, string, http.Header) {
	resp, err := br.http.Get(br.b.srv.URL + path)
	require.NoError(br.t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header
}

func (br *browser) post(path string, form url.Values) (int, string, http.Header) {
	resp, err := br.http.PostForm(br.b.srv.URL+path, form)
	require.NoError(br.t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header
}

var csrfRE = regexp.MustCompile(`name="_csrf" value="([^"]+)"`)
var tokenRE = regexp.MustCompile(`name="token" value="([^"]+)"`)

// attemptRE finds the attempt the resolve form carries, as a browser sends it.
var attemptRE = regexp.MustCompile(`name="attempt" value="([^"]+)"`)

func field(re *regexp.Regexp, body string) string {
	m := re.FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return m[1]
}

func (br *browser) signIn(token string) (int, string) {
	_, body, _ := br.get("/login")
	code, body, _ := br.post("/login", url.Values{"_csrf": {field(csrfRE, body)}, "token": {token}})
	return code, body
}

func TestDashboardAuth(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	anon := newBrowser(t, b)
	for _, p := range []string{"/", "/queue", "/search?q=x", "/fulfilments/0b6f3c38-8a7e-4a57-9d0e-2d1f4f6a4b11", "/events/stripe/evt_1"} {
		code, _, h := anon.get(p)
		require.Equal(t, http.StatusSeeOther, code, p)
		require.Equal(t, "/login", h.Get("Location"), p)
	}
	for _, p := range []string{"/fulfilments/0b6f3c38-8a7e-4a57-9d0e-2d1f4f6a4b11/resolve", "/fulfilments/0b6f3c38-8a7e-4a57-9d0e-2d1f4f6a4b11/resolve/confirm", "/events/stripe/evt_1/replay"} {
		code, _, _ := anon.post(p, url.Values{})
		require.Equal(t, http.StatusUnauthorized, code, p)
	}
	code, _, _ := anon.get("/login")
	require.Equal(t, http.StatusOK, code)

	code, body := anon.signIn("wrong-token")
	require.Equal(t, http.StatusUnauthorized, code)
	require.Contains(t, body, "Sign-in refused")
	code, _, _ = anon.get("/")
	require.Equal(t, http.StatusSeeOther, code, "a refused sign-in gives no session")

	// Login CSRF: a form without the double-submit value is refused.
	code, _, _ = newBrowser(t, b).post("/login", url.Values{"token": {b.token}})
	require.Equal(t, http.StatusForbidden, code)

	op := newBrowser(t, b)
	code, _ = op.signIn(b.token)
	require.Equal(t, http.StatusSeeOther, code)
	u, _ := url.Parse(b.srv.URL)
	var session *http.Cookie
	for _, c := range op.http.Jar.Cookies(u) {
		if c.Name == "guardian_session" {
			session = c
		}
	}
	require.NotNil(t, session)
	for _, p := range []string{"/", "/queue", "/search", "/search?q=pi_nothing"} {
		code, body, h := op.get(p)
		require.Equal(t, http.StatusOK, code, p)
		require.Contains(t, body, "ana", p)
		require.Contains(t, h.Get("Content-Security-Policy"), "script-src 'none'")
	}
	code, _, _ = op.get("/fulfilments/0b6f3c38-8a7e-4a57-9d0e-2d1f4f6a4b11")
	require.Equal(t, http.StatusNotFound, code)
	code, _, _ = op.get("/events/stripe/evt_nope")
	require.Equal(t, http.StatusNotFound, code)
	code, _, _ = op.get("/riverui/")
	require.Equal(t, http.StatusOK, code, "the session opens River UI")

	// A POST without the session's CSRF token is refused.
	code, _, _ = op.post("/events/stripe/evt_1/replay", url.Values{"_csrf": {"forged"}})
	require.Equal(t, http.StatusForbidden, code)

	_, body, _ = op.get("/")
	code, _, h := op.post("/logout", url.Values{"_csrf": {field(csrfRE, body)}})
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, "/login", h.Get("Location"))
	code, _, _ = op.get("/")
	require.Equal(t, http.StatusSeeOther, code, "signed out")
}

func TestDashboardResolve(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{answer: unknownFirst()})
	id := b.parked(t, "evt_1", "pi_1")
	op := newBrowser(t, b)
	code, _ := op.signIn(b.token)
	require.Equal(t, http.StatusSeeOther, code)

	code, body, _ := op.get("/queue")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "pi_1")
	require.Contains(t, body, "connector outcome: unknown")

	code, body, _ = op.get("/fulfilments/" + id)
	require.Equal(t, http.StatusOK, code)
	csrf, attempt := field(csrfRE, body), field(attemptRE, body)
	require.Equal(t, "1", attempt, "the form names the attempt on the page")

	// Missing evidence: the form comes back with the reason, nothing changes.
	code, body, _ = op.post("/fulfilments/"+id+"/resolve", url.Values{"_csrf": {csrf}, "attempt": {attempt}, "resolution": {"fulfilled"}, "reason": {"checked"}})
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "needs evidence")

	code, body, _ = op.post("/fulfilments/"+id+"/resolve", url.Values{"_csrf": {csrf}, "attempt": {attempt}, "resolution": {"fulfilled"}, "reason": {"receiver confirmed"}, "evidence": {"order 42"}})
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "Confirm resolution")
	token := field(tokenRE, body)
	require.NotEmpty(t, token)
	require.Equal(t, state.State("needs_reconciliation"), b.db.Fulfilment(t, id).State, "asking changes nothing")

	code, _, h := op.post("/fulfilments/"+id+"/resolve/confirm", url.Values{"_csrf": {field(csrfRE, body)}, "token": {token}})
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, "/fulfilments/"+id+"?resolved=1", h.Get("Location"))
	require.Equal(t, state.Fulfilled, b.db.Fulfilment(t, id).State)
	_, page, _ := op.get("/fulfilments/" + id + "?resolved=1")
	require.Contains(t, page, "operator ana")
	require.Contains(t, page, "receiver confirmed")

	// The same confirmation again: refused, nothing changes.
	code, page, _ = op.post("/fulfilments/"+id+"/resolve/confirm", url.Values{"_csrf": {field(csrfRE, body)}, "token": {token}})
	require.Equal(t, http.StatusGone, code)
	require.Contains(t, page, "already used")
}

func TestDashboardShowsTheRacePlainly(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{answer: unknownFirst()})
	id := b.parked(t, "evt_1", "pi_1")
	op := newBrowser(t, b)
	op.signIn(b.token)
	_, body, _ := op.get("/fulfilments/" + id)
	_, body, _ = op.post("/fulfilments/"+id+"/resolve", url.Values{"_csrf": {field(csrfRE, body)}, "attempt": {field(attemptRE, body)}, "resolution": {"cancelled"}, "reason": {"refunded"}})
	token := field(tokenRE, body)

	// Meanwhile another operator resolves it through the API.
	code, _ := b.api(t, "POST", "/api/v1/fulfilments/"+id+"/resolve", adminToken, web.ResolveRequest{Attempt: 1, Resolution: "fulfilled", Reason: "shipped", Evidence: "tracking 1Z"})
	require.Equal(t, http.StatusOK, code)

	code, page, _ := op.post("/fulfilments/"+id+"/resolve/confirm", url.Values{"_csrf": {field(csrfRE, body)}, "token": {token}})
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, page, "This fulfilment moved since you looked at it: it is now fulfilled at attempt 1")
	require.Equal(t, state.Fulfilled, b.db.Fulfilment(t, id).State)
}

func TestDashboardEscapesUntrustedText(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{answer: unknownFirst()})
	evil := `{"id":"evt_x","type":"checkout.session.completed","data":{"object":{"id":"cs_x","payment_status":"paid","payment_intent":"pi_x","description":"<script>alert(1)</script>"}}}`
	require.Equal(t, http.StatusOK, b.postStripe(t, evil).code)
	op := newBrowser(t, b)
	op.signIn(b.token)
	_, body, _ := op.get("/events/stripe/evt_x")
	require.NotContains(t, body, "<script>alert(1)</script>")
	require.Contains(t, body, "&lt;script&gt;alert(1)&lt;/script&gt;")
}

func TestDashboardSessionExpires(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Now()
	b := setup(t, setupOpts{now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	op := newBrowser(t, b)
	code, _ := op.signIn(b.token)
	require.Equal(t, http.StatusSeeOther, code)
	code, _, _ = op.get("/")
	require.Equal(t, http.StatusOK, code)

	mu.Lock()
	now = now.Add(time.Hour) // the session's TTL in this setup
	mu.Unlock()
	code, _, h := op.get("/")
	require.Equal(t, http.StatusSeeOther, code, "an expired session signs the operator out")
	require.Equal(t, "/login", h.Get("Location"))
}

func TestDashboardQueueGroupsEvidencePerRow(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{answer: unknownFirst()})
	b.parked(t, "evt_1", "pi_1")
	b.parked(t, "evt_2", "pi_2")
	op := newBrowser(t, b)
	op.signIn(b.token)
	code, body, _ := op.get("/queue")
	require.Equal(t, http.StatusOK, code)
	articles := strings.Split(body, `<article class="card parked">`)[1:]
	require.Len(t, articles, 2)
	for i, a := range articles {
		require.Contains(t, a, fmt.Sprintf("pi_%d", i+1), "oldest first")
		require.NotContains(t, a, fmt.Sprintf("pi_%d", 2-i))
		require.Equal(t, 1, strings.Count(a, "dispatching → needs_reconciliation"), "each row shows its own timeline")
		require.Equal(t, 3, strings.Count(a, "<tr><td>"), "pending, dispatching, parked")
	}
}

// TestDashboardRefusesToDispatchWhileInFlight: "dispatch again", confirmed
// while the parked call could still be running, is refused and says why.
func TestDashboardRefusesToDispatchWhileInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{answer: unknownFirst()})
	id := b.parked(t, "evt_1", "pi_1")
	op := newBrowser(t, b)
	op.signIn(b.token)
	_, body, _ := op.get("/fulfilments/" + id)
	_, body, _ = op.post("/fulfilments/"+id+"/resolve", url.Values{"_csrf": {field(csrfRE, body)}, "attempt": {field(attemptRE, body)},
		"resolution": {"pending"}, "reason": {"never arrived"}, "evidence": {"no request in the receiver's log"}})
	code, page, _ := op.post("/fulfilments/"+id+"/resolve/confirm", url.Values{"_csrf": {field(csrfRE, body)}, "token": {field(tokenRE, body)}})
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, page, "could still be running at the receiver")
	require.Equal(t, state.NeedsReconciliation, b.db.Fulfilment(t, id).State)
	require.Equal(t, 1, b.rec.CallsFor(id))
}

// TestDashboardBrowsesAndExports: each overview tile opens its state's
// list, which pages and exports CSV with the same filters.
func TestDashboardBrowsesAndExports(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{answer: unknownFirst()})
	parked := b.parked(t, "evt_1", "=HYPERLINK(\"http://evil\")")
	b.parked(t, "evt_2", "pi_2")
	op := newBrowser(t, b)
	op.signIn(b.token)
	_, overview, _ := op.get("/")
	require.Contains(t, overview, `href="/fulfilments?state=needs_reconciliation"`)
	require.Contains(t, overview, `<span class="n">2</span><span class="l">needs_reconciliation</span>`, "the tile counts the parked rows")
	require.Contains(t, overview, `<a href="/events?provider=stripe">stripe</a></td><td>2</td>`, "each served provider's deliveries of the last hour")
	require.Contains(t, overview, `<a href="/events?provider=shopify">shopify</a></td><td>0</td>`, "a served provider nothing reached reads zero")

	code, page, _ := op.get("/fulfilments?state=needs_reconciliation")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "/fulfilments/"+parked)
	require.NotContains(t, page, `action="/fulfilments/bulk"`, "no re-check is offered without a connector lookup")
	require.Contains(t, page, "pi_2")
	code, page, _ = op.get("/fulfilments?state=fulfilled")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "No fulfilments match")

	code, csvBody, h := op.get("/fulfilments.csv?state=needs_reconciliation")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "text/csv; charset=utf-8", h.Get("Content-Type"))
	rows, err := csv.NewReader(strings.NewReader(csvBody)).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 3, "a header and two rows")
	require.Equal(t, "payment_id", rows[0][2])
	var ids []string
	for _, r := range rows[1:] {
		ids = append(ids, r[2])
		require.Equal(t, "needs_reconciliation", r[3])
	}
	require.Contains(t, ids, `'=HYPERLINK("http://evil")`, "a formula-like value is defused")

	code, raw := b.api(t, "GET", "/api/v1/fulfilments?format=csv&limit=1", b.token, nil)
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.HasPrefix(string(raw), "id,provider,payment_id,"), string(raw))
	code, _ = b.api(t, "GET", "/api/v1/fulfilments?state=nonsense&format=csv", b.token, nil)
	require.Equal(t, http.StatusBadRequest, code)
}

// TestDashboardBulkRetry: an operator retries a page of failed
// fulfilments: one confirmation bound to exactly those, once, by them only;
// each payment is dispatched again once, audited with their name.
func TestDashboardBulkRetry(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{answer: firstPerPayment(connector.Result{Outcome: state.Declined, Evidence: map[string]any{"status": 422}})})
	f1 := b.reach(t, "evt_1", "pi_1", state.Failed)
	f2 := b.reach(t, "evt_2", "pi_2", state.Failed)
	op := newBrowser(t, b)
	op.signIn(b.token)

	code, page, _ := op.get("/fulfilments?state=failed")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "Retry the 2 on this page")
	form := url.Values{"_csrf": {field(csrfRE, page)}, "action": {"retry"}}
	for _, m := range regexp.MustCompile(`name="id" value="([^"]+)"`).FindAllStringSubmatch(page, -1) {
		form.Add("id", m[1])
	}
	require.ElementsMatch(t, []string{f1, f2}, form["id"], "the form carries the page's fulfilments")
	_, fulfilledPage, _ := op.get("/fulfilments?state=fulfilled")
	require.NotContains(t, fulfilledPage, `action="/fulfilments/bulk"`, "no bulk action for other states")

	code, confirm, _ := op.post("/fulfilments/bulk", form)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, confirm, "Confirm: Retry 2 failed fulfilments")
	token := field(tokenRE, confirm)
	require.NotEmpty(t, token)
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM fulfilment`), "asking changes nothing")

	// Another operator cannot confirm it.
	other, _, err := b.operators.Add(b.ctx, "bea")
	require.NoError(t, err)
	op2 := newBrowser(t, b)
	op2.signIn(other)
	_, p2, _ := op2.get("/fulfilments")
	code, _, _ = op2.post("/fulfilments/bulk/confirm", url.Values{"_csrf": {field(csrfRE, p2)}, "token": {token}})
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, 2, b.db.Count(t, `SELECT count(*) FROM fulfilment`))
	// The token is spent by that try: single use means single use.
	code, _, _ = op.post("/fulfilments/bulk/confirm", url.Values{"_csrf": {field(csrfRE, confirm)}, "token": {token}})
	require.Equal(t, http.StatusGone, code)

	code, confirm, _ = op.post("/fulfilments/bulk", form)
	require.Equal(t, http.StatusOK, code)
	code, results, _ := op.post("/fulfilments/bulk/confirm", url.Values{"_csrf": {field(csrfRE, confirm)}, "token": {field(tokenRE, confirm)}})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 2, strings.Count(results, ">retried<"), results)
	for _, p := range []string{"pi_1", "pi_2"} {
		require.Eventually(t, func() bool {
			return b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE payment_id = $1 AND state = 'fulfilled'`, p) == 1
		}, 10*time.Second, 10*time.Millisecond, "the retry of %s is fulfilled", p)
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment WHERE payment_id = $1 AND state = 'failed'`, p))
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment_transition t JOIN fulfilment f ON f.id = t.fulfilment_id
			WHERE f.payment_id = $1 AND t.actor = 'operator ana' AND t.reason LIKE 'retry of failed fulfilment %'`, p))
	}
	require.Len(t, b.rec.Calls(), 4, "each payment called once more, no more")

	// Retrying the same page again creates nothing: the payments are held.
	code, confirm, _ = op.post("/fulfilments/bulk", form)
	require.Equal(t, http.StatusOK, code)
	_, results, _ = op.post("/fulfilments/bulk/confirm", url.Values{"_csrf": {field(csrfRE, confirm)}, "token": {field(tokenRE, confirm)}})
	require.Equal(t, 2, strings.Count(results, ">payment_held<"), results)
	require.Equal(t, 4, b.db.Count(t, `SELECT count(*) FROM fulfilment`))
}

// TestDashboardSearchesByPrefix: a payment or event id's beginning finds it.
func TestDashboardSearchesByPrefix(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	b.reach(t, "evt_demo_1", "pi_demo_0622f7f2", state.Fulfilled)
	b.reach(t, "evt_other", "pi_other", state.Fulfilled)
	op := newBrowser(t, b)
	op.signIn(b.token)
	for _, q := range []string{"pi_demo", "evt_demo"} {
		code, page, _ := op.get("/search?q=" + q)
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, page, "pi_demo_0622f7f2", q)
		require.NotContains(t, page, "pi_other", q)
	}
	_, page, _ := op.get("/search?q=pi_demo")
	require.NotContains(t, page, "Showing the first matches only")
	many := make([]db.BatchEvent, 51)
	for i := range many {
		many[i] = db.BatchEvent{Deliveries: 1, EventParams: db.EventParams{Provider: "stripe", EventID: fmt.Sprintf("evt_many_%02d", i),
			Type: "checkout.session.completed", PaymentID: fmt.Sprintf("pi_many_%02d", i), Payload: []byte(`{}`)}}
	}
	_, err := db.InsertEvents(b.ctx, b.db.Pool, many)
	require.NoError(t, err)
	_, page, _ = op.get("/search?q=pi_many")
	require.Contains(t, page, "Showing the first matches only")
	require.Equal(t, 50, strings.Count(page, "/events/stripe/evt_many_"), "the first 50 events")

	// Underscore and percent are not wildcards.
	_, page, _ = op.get("/search?q=pi%25demo")
	require.NotContains(t, page, "pi_demo_0622f7f2")
	_, page, _ = op.get("/search?q=pi_d_mo")
	require.NotContains(t, page, "pi_demo_0622f7f2")

	code, page, _ := op.get("/events?type=checkout.session.completed&payment_prefix=pi_demo")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "evt_demo_1")
	require.NotContains(t, page, "evt_other")
	code, page, _ = op.get("/fulfilments?event_prefix=evt_oth")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "pi_other")
	require.NotContains(t, page, "pi_demo")
	code, _, _ = op.get("/events?since=yesterday")
	require.Equal(t, http.StatusBadRequest, code)

	code, csvBody, h := op.get("/events.csv?event_prefix=evt_demo")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "text/csv; charset=utf-8", h.Get("Content-Type"))
	rows, err := csv.NewReader(strings.NewReader(csvBody)).ReadAll()
	require.NoError(t, err)
	require.Equal(t, [][]string{{"provider", "event_id", "event_type", "payment_id", "deliveries", "first_seen_at", "last_seen_at"}}, rows[:1])
	require.Len(t, rows, 2)
	require.Equal(t, []string{"stripe", "evt_demo_1", "checkout.session.completed", "pi_demo_0622f7f2", "1"}, rows[1][:5])
	code, raw := b.api(t, "GET", "/api/v1/events?format=csv&limit=1", b.token, nil)
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.HasPrefix(string(raw), "provider,event_id,"), string(raw))
}

// TestDashboardBulkRecheck: with a connector lookup, a page of parked
// fulfilments is looked up at once, past its backoff, after one
// confirmation; each answer is applied and audited under the operator.
func TestDashboardBulkRecheck(t *testing.T) {
	t.Parallel()
	looker := &lookupAnswers{answers: map[string]connector.Answer{}}
	b := setup(t, setupOpts{answer: unknownFirst(), reconcileInterval: time.Hour, fulfilment: func(c *fulfilment.Config) {
		c.ReconcileGrace, c.ReconcileBackoff = time.Minute, time.Hour
		c.Looker = looker
	}})
	// The reconciler's own round runs once at start and then an hour
	// later: once it has run, and before any row is parked, the re-check
	// is alone. (On a loaded machine the start can come late; a round
	// that ran after the rows were backdated would settle them first.)
	require.Eventually(t, func() bool {
		return b.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'guardian_reconcile' AND state = 'completed'`) == 1
	}, 30*time.Second, 10*time.Millisecond, "the reconciler's start-up round")
	done, notDone := b.parked(t, "evt_1", "pi_1"), b.parked(t, "evt_2", "pi_2")
	looker.set(map[string]connector.Answer{b.db.Fulfilment(t, done).Key: connector.Performed, b.db.Fulfilment(t, notDone).Key: connector.NotPerformed})
	op := newBrowser(t, b)
	op.signIn(b.token)
	_, page, _ := op.get("/fulfilments?state=needs_reconciliation")
	require.Contains(t, page, "Re-check the 2 on this page")
	// Within the grace a call could still be running: not asked.
	code, confirm, _ := op.post("/fulfilments/bulk", url.Values{"_csrf": {field(csrfRE, page)}, "action": {"recheck"}, "id": {done}})
	require.Equal(t, http.StatusOK, code)
	_, results, _ := op.post("/fulfilments/bulk/confirm", url.Values{"_csrf": {field(csrfRE, confirm)}, "token": {field(tokenRE, confirm)}})
	require.Contains(t, results, ">within_grace<")
	require.Equal(t, state.NeedsReconciliation, b.db.Fulfilment(t, done).State)
	for _, id := range []string{done, notDone} {
		b.db.Backdate(t, id, time.Now().Add(-2*time.Minute))
	}
	form := url.Values{"_csrf": {field(csrfRE, page)}, "action": {"recheck"}, "id": {done, notDone}}
	code, confirm, _ = op.post("/fulfilments/bulk", form)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, confirm, "Confirm: Re-check 2 needs_reconciliation fulfilments")
	code, results, _ = op.post("/fulfilments/bulk/confirm", url.Values{"_csrf": {field(csrfRE, confirm)}, "token": {field(tokenRE, confirm)}})
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, results, ">fulfilled<")
	require.Contains(t, results, ">redispatched<")
	require.Equal(t, state.Fulfilled, b.db.Fulfilment(t, done).State)
	b.waitFulfilled(t, "pi_2") // dispatched again under the same key, and done
	require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM fulfilment_check WHERE fulfilment_id = $1 AND actor = 'operator ana'`, done))
}

// lookupAnswers is a connector lookup answering from a table, cannot tell
// for anything else.
type lookupAnswers struct {
	mu      sync.Mutex
	answers map[string]connector.Answer
}

func (l *lookupAnswers) set(answers map[string]connector.Answer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.answers = answers
}

func (l *lookupAnswers) Lookup(_ context.Context, key string) (connector.Answer, map[string]any, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.answers[key]
	if !ok {
		a = connector.CannotTell
	}
	return a, map[string]any{"lookup": "table"}, nil
}

// TestDashboardBulkCapsThePage: a page longer than a bulk action takes
// offers no action, and says why.
func TestDashboardBulkCapsThePage(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	events := make([]db.BatchEvent, fulfilment.MaxBulk+1)
	for i := range events {
		events[i] = db.BatchEvent{Deliveries: 1, EventParams: db.EventParams{Provider: "stripe", EventID: fmt.Sprintf("evt_%03d", i),
			Type: "checkout.session.completed", PaymentID: fmt.Sprintf("pi_%03d", i), Payload: []byte(`{}`)}}
	}
	stored, err := db.InsertEvents(b.ctx, b.db.Pool, events)
	require.NoError(t, err)
	items := make([]db.BatchFulfilment, len(stored))
	for i, e := range stored {
		items[i] = db.BatchFulfilment{EventPK: e.ID, Actor: "test"}
	}
	_, err = db.InsertFulfilments(b.ctx, b.db.Pool, items, db.Birth{Reason: "test"})
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(b.ctx, `UPDATE fulfilment SET state = 'dispatching', attempt = 1`)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(b.ctx, `UPDATE fulfilment SET state = 'failed'`)
	require.NoError(t, err)

	op := newBrowser(t, b)
	op.signIn(b.token)
	_, page, _ := op.get(fmt.Sprintf("/fulfilments?state=failed&limit=%d", fulfilment.MaxBulk+1))
	require.NotContains(t, page, `action="/fulfilments/bulk"`)
	require.Contains(t, page, "Retry acts on at most 100 fulfilments at a time")
	_, page, _ = op.get(fmt.Sprintf("/fulfilments?state=failed&limit=%d", fulfilment.MaxBulk))
	require.Contains(t, page, "Retry the 100 on this page")
}

// TestUnmappedPaidEventsAreSeen: a paid event naming no payment Guardian
// can read is stored, acknowledged and flagged, shown on the overview, the
// events page and the event's page, and listed by the API's filter.
func TestUnmappedPaidEventsAreSeen(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	unmapped := `{"id":"evt_unmapped","object":"event","type":"checkout.session.completed","data":{"object":{"object":"checkout.session","payment_status":"paid"}}}`
	require.Equal(t, http.StatusOK, b.postStripe(t, unmapped).code, "well signed: acknowledged")
	require.Equal(t, http.StatusOK, b.postStripe(t, intentEvent("evt_mapped", "pi_mapped")).code)

	code, body := b.api(t, "GET", "/api/v1/events?unmapped=true", b.token, nil)
	require.Equal(t, http.StatusOK, code, string(body))
	var list web.EventList
	require.NoError(t, json.Unmarshal(body, &list))
	require.Len(t, list.Events, 1)
	require.Equal(t, "evt_unmapped", list.Events[0].EventID)
	require.Equal(t, "no payment id in data.object", list.Events[0].Unmapped)
	code, _ = b.api(t, "GET", "/api/v1/events?unmapped=maybe", b.token, nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM fulfilment f JOIN webhook_event e ON e.id = f.event_pk WHERE e.event_id = 'evt_unmapped'`))

	br := newBrowser(t, b)
	br.signIn(b.token)
	_, page, _ := br.get("/")
	require.Contains(t, page, "1 paid event names no payment Guardian can read")
	_, page, _ = br.get("/events?unmapped=true")
	require.Contains(t, page, "unmapped: no payment id in data.object")
	require.NotContains(t, page, "evt_mapped")
	_, page, _ = br.get("/events/stripe/evt_unmapped")
	require.Contains(t, page, "none Guardian can read")
}
