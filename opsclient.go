package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/guardian-pay/guardian/app/settings"
	"github.com/guardian-pay/guardian/web"
)

// defaultURL is where the client commands find a local Guardian.
const defaultURL = "http://127.0.0.1" + web.DefaultAddr

// The operator commands' settings.
var (
	guardianURL = settings.String(settings.Setting{
		Name: "GUARDIAN_URL", Default: "`http://127.0.0.1:8080`", Client: true,
		Doc: "the Guardian the operator commands (and `guardian demo`, `guardian bench`) talk to",
	}, defaultURL)
	operatorToken = settings.String(settings.Setting{
		Name: "GUARDIAN_OPERATOR_TOKEN", Default: "the first `GUARDIAN_ADMIN_TOKEN`", Secret: true, Client: true,
		Doc: "the operator token the commands present (`guardian operators add NAME` makes one)",
	}, "")
	metricsURL = settings.String(settings.Setting{
		Name: "GUARDIAN_METRICS_URL", Default: "`http://127.0.0.1:9090`", Client: true,
		Doc: "the operations listener `guardian bench` reads `/metrics` from, to count fulfilments",
	}, "http://"+DefaultMetricsAddr)
)

// opsClient talks to a running Guardian's operator API.
type opsClient struct {
	base  string
	token string
	http  *http.Client
}

// apiError is a non-2xx answer, kept with its status for exit codes.
type apiError struct {
	Status int
	Msg    string
	Body   []byte
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), e.Msg)
}

func newOpsClient(getenv func(string) string) (*opsClient, error) {
	env := settings.NewEnv(getenv)
	token := cmp.Or(strings.TrimSpace(operatorToken.Read(env)), first(adminTokens.Read(env), ""))
	if token == "" {
		return nil, errors.New("GUARDIAN_OPERATOR_TOKEN is empty: set your operator token (from `guardian operators add NAME`) for the server in GUARDIAN_URL")
	}
	base := strings.TrimRight(guardianURL.Read(env), "/")
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("GUARDIAN_URL must be an absolute http(s) URL")
	}
	return &opsClient{base: base, token: token, http: &http.Client{Timeout: 30 * time.Second}}, nil
}

// do sends a request and decodes a 2xx answer into out; it returns the raw
// body too, for --json.
func (c *opsClient) do(ctx context.Context, method, path string, in, out any) ([]byte, error) {
	var body io.Reader
	if in != nil {
		raw, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(raw, &e)
		return raw, &apiError{Status: resp.StatusCode, Msg: e.Error, Body: raw}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return raw, fmt.Errorf("unexpected answer from %s: %w", c.base, err)
		}
	}
	return raw, nil
}
