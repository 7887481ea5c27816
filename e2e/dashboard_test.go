package e2e

import (
	"bytes"
	"context"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/db/dbtest"
)

// chromium finds the browser, failing with how to install it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{os.Getenv("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium for the dashboard's browser test: install it (apt-get update && apt-get install -y chromium; .ci/run does) or set CHROMIUM to its path")
	return ""
}

// TestDashboardInBrowser signs in with headless Chromium, finds a parked
// fulfilment in the queue, resolves it through the confirmation, and checks
// the audit entry; a wrong token is refused and a payload carrying <script>
// renders as text.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	conn := newFakeConnector(t)
	conn.fail = "pi_dash"
	conn.reject = "pi_refused_4"
	g := start(t, baseEnv(t, d, conn))

	now := time.Now()
	for _, body := range []string{
		`{"id":"evt_dash_1","type":"checkout.session.completed","data":{"object":{"id":"cs_dash_1","payment_status":"paid","payment_intent":"pi_dash_1","customer_details":{"name":"<script>window.__xss=1</script>"}}}}`,
		`{"id":"evt_dash_2","type":"checkout.session.completed","data":{"object":{"id":"cs_pi_dash_2","payment_status":"paid","payment_intent":"pi_dash_2"}}}`,
		`{"id":"evt_ok_3","type":"checkout.session.completed","data":{"object":{"id":"cs_pi_ok_3","payment_status":"paid","payment_intent":"pi_ok_3"}}}`,
		`{"id":"evt_refused_4","type":"checkout.session.completed","data":{"object":{"id":"cs_pi_refused_4","payment_status":"paid","payment_intent":"pi_refused_4"}}}`,
	} {
		require.Equal(t, http.StatusOK, g.post(t, "/webhooks/stripe", providertest.SignStripe([]byte(body), stripeSecret, now), []byte(body)))
	}
	require.Eventually(t, func() bool {
		return stateCount(t, d, "needs_reconciliation") == 2 && stateCount(t, d, "fulfilled") == 1 && stateCount(t, d, "failed") == 1
	},
		15*time.Second, 20*time.Millisecond)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	defer cancelTimeout()

	dialogs := make(chan string, 4)
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			select {
			case dialogs <- e.Message:
			default:
			}
		}
	}))

	text := func(sel string) string {
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		require.NoError(t, err)
		return s
	}

	anaToken := addOperator(t, d, "ana")

	// A wrong token is refused.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(g.url+"/login"),
		chromedp.SendKeys(chromedp.CSS(`input[name=token]`), "not-the-admin-token"),
		chromedp.Click(chromedp.CSS(`button.primary`)),
		chromedp.WaitVisible(chromedp.CSS(`p.error`)),
	))
	require.Contains(t, text(`p.error`), "Sign-in refused")

	// The right one opens the overview.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(g.url+"/login"),
		chromedp.SendKeys(chromedp.CSS(`input[name=token]`), anaToken),
		chromedp.Click(chromedp.CSS(`button.primary`)),
		chromedp.WaitVisible(chromedp.CSS(`section.tiles`)),
	))
	require.Contains(t, text(`section.tiles`), "needs_reconciliation")

	// The queue shows both parked rows with their evidence; take the screenshot.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(g.url+"/queue"),
		chromedp.WaitVisible(chromedp.CSS(`article.parked`)),
	))
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	queue := text(`main`)
	require.Contains(t, queue, "pi_dash_1")
	require.Contains(t, queue, "pi_dash_2")
	require.Contains(t, queue, "connector outcome: unknown")
	require.NotContains(t, queue, "pi_ok_3")
	img, err := png.Decode(bytes.NewReader(shot))
	require.NoError(t, err, "the screenshot is a PNG")
	require.Greater(t, img.Bounds().Dx(), 800)
	out := filepath.Join(t.TempDir(), "dashboard.png")
	if os.Getenv("UPDATE_SCREENSHOT") != "" {
		out = filepath.Join("..", "docs", "dashboard.png")
	}
	require.NoError(t, os.WriteFile(out, shot, 0o644))

	// Open pi_dash_1: its payload's <script> is text, and never ran.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(g.url+"/search?q=pi_dash_1"),
		chromedp.WaitVisible(chromedp.CSS(`main table a`)),
		chromedp.Click(chromedp.CSS(`main table a`)),
		chromedp.WaitVisible(chromedp.CSS(`#resolve`)),
	))
	hasScriptText, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`[...document.querySelectorAll('pre')].some(p => p.textContent.includes('<script>window.__xss=1</script>'))`))
	require.NoError(t, err)
	xss, err := chromedp.Run(ctx, chromedp.Evaluate[string](`String(window.__xss)`))
	require.NoError(t, err)
	require.True(t, hasScriptText, "the payload shows the script as text")
	require.Equal(t, "undefined", xss, "the payload's script did not run")

	// Resolve it: reason, fact, then the single-use confirmation.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`input[value=fulfilled]`)),
		chromedp.SendKeys(chromedp.CSS(`textarea[name=reason]`), "receiver confirmed the order"),
		chromedp.SendKeys(chromedp.CSS(`textarea[name=evidence]`), "receiver log: order 8812 at 10:04"),
		chromedp.Click(chromedp.CSS(`#resolve button.primary`)),
		chromedp.WaitVisible(chromedp.CSS(`form[action$="/resolve/confirm"]`)),
	))
	require.Contains(t, text(`main`), "Confirm resolution")
	require.Equal(t, 2, stateCount(t, d, "needs_reconciliation"), "nothing changes before the confirmation")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`main button.primary`)),
		chromedp.WaitVisible(chromedp.CSS(`p.flash`)),
	))
	require.Contains(t, text(`p.flash`), "now fulfilled")
	timeline := text(`table.timeline`)
	require.Contains(t, timeline, "operator ana")
	require.Contains(t, timeline, "receiver confirmed the order")
	require.Contains(t, timeline, "receiver log: order 8812 at 10:04")
	require.Equal(t, 1, stateCount(t, d, "needs_reconciliation"))
	require.Equal(t, 2, stateCount(t, d, "fulfilled"))

	// Events found by a payment id's beginning; the failed payment retried
	// from its list, after one confirmation.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(g.url+"/events?payment_prefix=pi_refused"),
		chromedp.WaitVisible(chromedp.CSS(`main table`)),
	))
	events := text(`main table`)
	require.Contains(t, events, "evt_refused_4")
	require.NotContains(t, events, "evt_ok_3")
	conn.mu.Lock()
	conn.reject = ""
	conn.mu.Unlock()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(g.url+"/fulfilments?state=failed"),
		chromedp.WaitVisible(chromedp.CSS(`form.bulk button`)),
		chromedp.Click(chromedp.CSS(`form.bulk button`)),
		chromedp.WaitVisible(chromedp.CSS(`form[action="/fulfilments/bulk/confirm"]`)),
	))
	require.Contains(t, text(`main h1`), "Retry 1 failed fulfilment")
	require.Equal(t, 1, stateCount(t, d, "failed"))
	require.Equal(t, 2, stateCount(t, d, "fulfilled"), "nothing changes before the confirmation")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`main button.primary`)),
		chromedp.WaitVisible(chromedp.CSS(`main table`)),
	))
	require.Contains(t, text(`main table`), "retried")
	require.Eventually(t, func() bool { return stateCount(t, d, "fulfilled") == 3 }, 15*time.Second, 20*time.Millisecond)
	require.Equal(t, 1, stateCount(t, d, "failed"), "the failed row stays as the record")

	// River UI, on the same session, renders under its Content-Security-
	// Policy: its scripts are its own, and React renders its navigation.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(g.url+"/riverui/"),
		chromedp.WaitVisible(chromedp.CSS(`#root nav`)),
	))

	select {
	case msg := <-dialogs:
		t.Fatalf("a JavaScript dialog opened: %q", msg)
	default:
	}
	require.False(t, strings.Contains(g.logs(), anaToken), "the operator token is not logged")
	g.stop(t)
}
