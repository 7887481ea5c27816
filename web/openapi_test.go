package web_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/web"
)

// spec is the parsed OpenAPI document, with a minimal JSON Schema checker
// for what it uses: $ref, type, required, properties, items, enum, formats
// date-time and uuid.
type spec struct {
	doc map[string]any
}

func loadSpec(t *testing.T) spec {
	t.Helper()
	var doc map[string]any
	require.NoError(t, json.Unmarshal(web.OpenAPI(), &doc))
	require.Equal(t, "3.0.3", doc["openapi"])
	return spec{doc: doc}
}

func (s spec) resolve(node map[string]any) map[string]any {
	for {
		ref, ok := node["$ref"].(string)
		if !ok {
			return node
		}
		at := any(s.doc)
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			at = at.(map[string]any)[part]
		}
		node = at.(map[string]any)
	}
}

// check returns what is wrong with v against schema, or "".
func (s spec) check(schema map[string]any, v any, path string) string {
	schema = s.resolve(schema)
	if enum, ok := schema["enum"].([]any); ok && !slices.Contains(enum, v) {
		return fmt.Sprintf("%s: %v is not one of %v", path, v, enum)
	}
	switch schema["type"] {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: want an object, got %T", path, v)
		}
		for _, r := range asList(schema["required"]) {
			if _, ok := m[r.(string)]; !ok {
				return fmt.Sprintf("%s: required %q missing", path, r)
			}
		}
		props, _ := schema["properties"].(map[string]any)
		for k, val := range m {
			p, ok := props[k].(map[string]any)
			if !ok {
				if extra, ok := schema["additionalProperties"].(map[string]any); ok {
					if msg := s.check(extra, val, path+"."+k); msg != "" {
						return msg
					}
					continue
				}
				if props != nil {
					return fmt.Sprintf("%s: %q is not documented", path, k)
				}
				continue
			}
			if msg := s.check(p, val, path+"."+k); msg != "" {
				return msg
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			return fmt.Sprintf("%s: want an array, got %T", path, v)
		}
		for i, item := range a {
			if msg := s.check(schema["items"].(map[string]any), item, fmt.Sprintf("%s[%d]", path, i)); msg != "" {
				return msg
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return fmt.Sprintf("%s: want a string, got %T", path, v)
		}
		switch schema["format"] {
		case "date-time":
			if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
				return fmt.Sprintf("%s: %q is not a date-time", path, str)
			}
		case "uuid":
			if !db.ValidUUID(str) {
				return fmt.Sprintf("%s: %q is not a uuid", path, str)
			}
		}
	case "integer":
		f, ok := v.(float64)
		if !ok || f != float64(int64(f)) {
			return fmt.Sprintf("%s: want an integer, got %v", path, v)
		}
	case "number":
		if _, ok := v.(float64); !ok {
			return fmt.Sprintf("%s: want a number, got %T", path, v)
		}
	}
	return ""
}

func asList(v any) []any { l, _ := v.([]any); return l }

// documented returns the routes the spec documents, as "METHOD /api/v1/..."
// in Echo's path syntax.
func (s spec) documented() map[string]map[string]any {
	out := map[string]map[string]any{}
	param := regexp.MustCompile(`\{([a-z_]+)\}`)
	for path, item := range s.doc["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			out[strings.ToUpper(method)+" /api/v1"+param.ReplaceAllString(path, ":$1")] = op.(map[string]any)
		}
	}
	return out
}

// answer checks a real answer against the spec's response for its status.
func (s spec) answer(t *testing.T, route string, code int, body []byte) {
	t.Helper()
	op := s.documented()[route]
	require.NotNil(t, op, "%s is not documented", route)
	resp, ok := op["responses"].(map[string]any)[fmt.Sprint(code)].(map[string]any)
	require.True(t, ok, "%s answered %d, which the spec does not document: %s", route, code, body)
	resp = s.resolve(resp)
	schema := resp["content"].(map[string]any)["application/json"].(map[string]any)["schema"].(map[string]any)
	var v any
	require.NoError(t, json.Unmarshal(body, &v), "%s: %s", route, body)
	require.Empty(t, s.check(schema, v, route), "%s answered %d: %s", route, code, body)
}

// TestOpenAPIMatchesTheHandlers: every operator route is documented and
// every documented route exists, and real answers, good and bad, have the
// documented shapes.
func TestOpenAPIMatchesTheHandlers(t *testing.T) {
	t.Parallel()
	sp := loadSpec(t)
	b := setup(t, setupOpts{answer: unknownFirst()})
	documented := sp.documented()
	served := map[string]bool{}
	for _, r := range b.handler.(*echo.Echo).Routes() {
		if !strings.HasPrefix(r.Path, "/api/v1/") || r.Path == "/api/v1/*" || r.Method == echo.RouteNotFound {
			continue
		}
		key := r.Method + " " + r.Path
		served[key] = true
		_, ok := documented[key]
		require.True(t, ok, "%s is served but not in the OpenAPI document", key)
	}
	for key := range documented {
		require.True(t, served[key], "documented but not served: %s", key)
	}

	parked := b.parked(t, "evt_1", "pi_1")
	toCancel := b.parked(t, "evt_2", "pi_2")
	call := func(method, path, route string, body any, want int) {
		t.Helper()
		code, raw := b.api(t, method, path, b.token, body)
		require.Equal(t, want, code, "%s %s: %s", method, path, raw)
		sp.answer(t, route, code, raw)
	}
	call("GET", "/api/v1/fulfilments?state=needs_reconciliation&limit=1", "GET /api/v1/fulfilments", nil, http.StatusOK)
	call("GET", "/api/v1/fulfilments?state=bogus", "GET /api/v1/fulfilments", nil, http.StatusBadRequest)
	call("GET", "/api/v1/fulfilments/"+parked, "GET /api/v1/fulfilments/:id", nil, http.StatusOK)
	call("GET", "/api/v1/fulfilments/0b6f3c38-8a7e-4a57-9d0e-2d1f4f6a4b11", "GET /api/v1/fulfilments/:id", nil, http.StatusNotFound)
	call("GET", "/api/v1/events/stripe/evt_1", "GET /api/v1/events/:provider/:event_id", nil, http.StatusOK)
	call("GET", "/api/v1/events/stripe/evt_none", "GET /api/v1/events/:provider/:event_id", nil, http.StatusNotFound)
	call("GET", "/api/v1/fulfilments?payment_prefix=pi_&type=checkout.session.completed", "GET /api/v1/fulfilments", nil, http.StatusOK)
	call("GET", "/api/v1/events?payment_prefix=pi_&limit=1", "GET /api/v1/events", nil, http.StatusOK)
	call("GET", "/api/v1/events?since=yesterday", "GET /api/v1/events", nil, http.StatusBadRequest)
	call("GET", "/api/v1/events?cursor=bogus", "GET /api/v1/events", nil, http.StatusBadRequest)
	retry := "POST /api/v1/fulfilments/retry"
	call("POST", "/api/v1/fulfilments/retry", retry, web.BulkRequest{IDs: []string{parked, "nonsense"}}, http.StatusOK)
	call("POST", "/api/v1/fulfilments/retry", retry, web.BulkRequest{}, http.StatusBadRequest)
	// This server has no connector lookup: nothing to re-check with.
	call("POST", "/api/v1/fulfilments/recheck", "POST /api/v1/fulfilments/recheck", web.BulkRequest{IDs: []string{parked}}, http.StatusConflict)
	call("GET", "/api/v1/stats", "GET /api/v1/stats", nil, http.StatusOK)
	call("GET", "/api/v1/actions", "GET /api/v1/actions", nil, http.StatusOK)
	call("GET", "/api/v1/refused", "GET /api/v1/refused", nil, http.StatusOK)
	call("GET", "/api/v1/openapi.json", "GET /api/v1/openapi.json", nil, http.StatusOK)

	resolve := "POST /api/v1/fulfilments/:id/resolve"
	call("POST", "/api/v1/fulfilments/"+parked+"/resolve", resolve, web.ResolveRequest{Attempt: 1, Resolution: "fulfilled", Reason: "r"}, http.StatusBadRequest)
	call("POST", "/api/v1/fulfilments/"+parked+"/resolve", resolve, web.ResolveRequest{Attempt: 1, Resolution: "fulfilled", Reason: "r", Evidence: "e"}, http.StatusOK)
	call("POST", "/api/v1/fulfilments/"+parked+"/resolve", resolve, web.ResolveRequest{Attempt: 1, Resolution: "cancelled", Reason: "r"}, http.StatusConflict)
	call("POST", "/api/v1/fulfilments/0b6f3c38-8a7e-4a57-9d0e-2d1f4f6a4b11/resolve", resolve, web.ResolveRequest{Attempt: 1, Resolution: "cancelled", Reason: "r"}, http.StatusNotFound)
	call("POST", "/api/v1/fulfilments/"+toCancel+"/resolve", resolve, web.ResolveRequest{Attempt: 1, Resolution: "cancelled", Reason: "r"}, http.StatusOK)
	reopen := "POST /api/v1/fulfilments/:id/reopen"
	call("POST", "/api/v1/fulfilments/"+toCancel+"/reopen", reopen, web.ReopenRequest{Attempt: 1, Reason: "r"}, http.StatusBadRequest)
	call("POST", "/api/v1/fulfilments/"+toCancel+"/reopen", reopen, web.ReopenRequest{Attempt: 1, Reason: "r", Evidence: "e"}, http.StatusOK)
	call("POST", "/api/v1/fulfilments/"+toCancel+"/reopen", reopen, web.ReopenRequest{Attempt: 1, Reason: "r", Evidence: "e"}, http.StatusConflict)
	replay := "POST /api/v1/events/:provider/:event_id/replay"
	call("POST", "/api/v1/events/stripe/evt_1/replay", replay, nil, http.StatusOK)
	call("POST", "/api/v1/events/stripe/evt_none/replay", replay, nil, http.StatusNotFound)
	call("POST", "/api/v1/events/stripe/evt_1/replay", replay, map[string]string{"operator": "x"}, http.StatusBadRequest)
	call("POST", "/api/v1/tokens", "POST /api/v1/tokens", web.IssueTokenRequest{Purpose: "claim", TTLSeconds: 60}, http.StatusCreated)
	call("POST", "/api/v1/tokens", "POST /api/v1/tokens", web.IssueTokenRequest{Purpose: "claim"}, http.StatusBadRequest)

	code, raw := b.api(t, "GET", "/api/v1/stats", "", nil)
	require.Equal(t, http.StatusUnauthorized, code)
	sp.answer(t, "GET /api/v1/stats", code, raw)
}

// TestOpenAPIRefusalReasons: the OpenAPI description's Refusal.reason
// lists exactly db.RefusalReasons.
func TestOpenAPIRefusalReasons(t *testing.T) {
	t.Parallel()
	s := loadSpec(t)
	schemas := s.doc["components"].(map[string]any)["schemas"].(map[string]any)
	enum := schemas["Refusal"].(map[string]any)["properties"].(map[string]any)["reason"].(map[string]any)["enum"].([]any)
	var want []any
	for _, r := range db.RefusalReasons {
		want = append(want, string(r))
	}
	require.ElementsMatch(t, want, enum)
}
