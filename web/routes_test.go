package web_test

import (
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
)

// anonymousRoutes reads docs/security.md's route table: the routes that
// answer without a credential, as "METHOD path".
func anonymousRoutes(t *testing.T) map[string]bool {
	t.Helper()
	doc, err := os.ReadFile("../docs/security.md")
	require.NoError(t, err)
	row := regexp.MustCompile("(?m)^\\| ([A-Z]+) \\| `([^`]+)` \\| yes \\| (.+) \\|$")
	out := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		require.NotEmpty(t, strings.TrimSpace(m[3]), "%s %s: an anonymous route needs its reason", m[1], m[2])
		out[m[1]+" "+m[2]] = true
	}
	require.NotEmpty(t, out, "docs/security.md has no route table")
	return out
}

// TestEveryAnonymousRouteIsListed: every route the server has either
// refuses an anonymous request, or is listed, with its reason, in
// docs/security.md; and every listed route exists.
func TestEveryAnonymousRouteIsListed(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	listed := anonymousRoutes(t)
	e, ok := b.handler.(*echo.Echo)
	require.True(t, ok)
	seen := map[string]bool{}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, r := range e.Routes() {
		key := r.Method + " " + r.Path
		if listed[key] {
			seen[key] = true
			continue
		}
		if r.Method == echo.RouteNotFound || r.Method == "CONNECT" {
			continue
		}
		path := regexp.MustCompile(`:[a-z_]+|\*`).ReplaceAllString(r.Path, "x")
		req, err := http.NewRequest(r.Method, b.srv.URL+path, nil)
		require.NoError(t, err)
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		signIn := resp.StatusCode == http.StatusSeeOther && resp.Header.Get("Location") == "/login"
		require.True(t, resp.StatusCode == http.StatusUnauthorized || signIn,
			"%s answers %d anonymously but is not listed as anonymous in docs/security.md", key, resp.StatusCode)
	}
	for key := range listed {
		require.True(t, seen[key], "docs/security.md lists %s, which the server does not serve", key)
	}
}
