// Rendering the dashboard: templates, their functions, the page frame and
// its Content-Security-Policy, and the routes that serve it.

package web

import (
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

var funcs = template.FuncMap{
	"ago": func(t time.Time) string { return time.Since(t).Round(time.Second).String() },
	"ts":  stamp,
	"tsp": func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return stamp(*t)
	},
	"pretty": func(raw json.RawMessage) string {
		var v any
		if json.Unmarshal(raw, &v) != nil {
			return string(raw)
		}
		// Unescaped here on purpose: the template escapes it for HTML, so
		// the operator reads the payload's own characters.
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v)
		return strings.TrimSpace(b.String())
	},
	"query": url.QueryEscape,
	"path":  url.PathEscape,
	"deref": func(t *time.Time) time.Time { return *t },
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

func parseTemplates() (map[string]*template.Template, error) {
	pages := map[string]*template.Template{}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(name, "templates/"), ".html")
		if base == "layout" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", name)
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", name, err)
		}
		pages[base] = t
	}
	return pages, nil
}

// page is what every template receives.
type page struct {
	Title    string
	Operator string
	CSRF     string
	Flash    string
	Error    string
	Data     any
}

func (s *Server) render(c echo.Context, code int, name string, p page) error {
	if sess, ok := c.Get("session").(session); ok {
		p.Operator = sess.Operator
		p.CSRF = s.csrfToken(sess)
	}
	var b strings.Builder
	if err := s.pages[name].Execute(&b, p); err != nil {
		return fmt.Errorf("render %s: %w", name, err)
	}
	c.Response().Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'none'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
	c.Response().Header().Set("X-Content-Type-Options", "nosniff")
	c.Response().Header().Set("Referrer-Policy", "same-origin")
	return c.HTML(code, b.String())
}

// mountDashboard serves the operator dashboard at /.
func (s *Server) mountDashboard() error {
	var err error
	if s.pages, err = parseTemplates(); err != nil {
		return err
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return err
	}
	e := s.echo
	e.GET("/static/*", echo.WrapHandler(http.StripPrefix("/static/", http.FileServer(http.FS(static)))))
	e.GET("/login", s.handleLoginPage)
	e.POST("/login", s.handleLogin, s.formOnly)
	e.POST("/logout", s.handleLogout, s.formOnly)
	// Per route, not a group: an Echo group with middleware also answers
	// every unmatched path under it, which would sign-in-gate plain 404s.
	e.GET("/", s.handleOverview, s.requireSession)
	e.GET("/queue", s.handleQueue, s.requireSession)
	e.GET("/search", s.handleSearch, s.requireSession)
	e.GET("/refused", s.handleRefusedPage, s.requireSession)
	e.GET("/fulfilments", s.handleListPage, s.requireSession)
	e.GET("/fulfilments.csv", s.handleListCSV, s.requireSession)
	e.POST("/fulfilments/bulk", s.handleBulkAsk, s.requireSession)
	e.POST("/fulfilments/bulk/confirm", s.handleBulkConfirm, s.requireSession)
	e.GET("/events", s.handleEventsPage, s.requireSession)
	e.GET("/subscriptions", s.handleSubscriptionsPage, s.requireSession)
	e.GET("/subscriptions/:provider/:subscription_id", s.handleSubscriptionPage, s.requireSession)
	e.GET("/events.csv", s.handleEventsCSV, s.requireSession)
	e.GET("/fulfilments/:id", s.handleFulfilmentPage, s.requireSession)
	e.POST("/fulfilments/:id/resolve", s.handleResolveAsk, s.requireSession)
	e.POST("/fulfilments/:id/resolve/confirm", s.handleResolveConfirm, s.requireSession)
	e.GET("/events/:provider/:event_id", s.handleEventPage, s.requireSession)
	e.POST("/events/:provider/:event_id/replay", s.handleReplayForm, s.requireSession)
	return nil
}
