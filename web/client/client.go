// Package client is the operator's side of Guardian's HTTP API: the
// `guardian fulfilments`, `reconcile` and `events` commands, and `guardian
// demo`, which sends signed sample deliveries to a development server and
// shows what became of them through the API. Each takes its settings
// parsed (Config); none reads the environment.
package client

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

// DefaultURL is where the commands find a local Guardian.
const DefaultURL = "http://127.0.0.1" + web.DefaultAddr

// The commands' settings.
var (
	urlSetting = settings.String(settings.Setting{
		Name: "GUARDIAN_URL", Default: "`http://127.0.0.1:8080`", Client: true,
		Doc: "the Guardian the operator commands (and `guardian demo`, `guardian bench`) talk to",
	}, DefaultURL)
	tokenSetting = settings.String(settings.Setting{
		Name: "GUARDIAN_OPERATOR_TOKEN", Default: "the first `GUARDIAN_ADMIN_TOKEN`", Secret: true, Client: true,
		Doc: "the operator token the commands present (`guardian operators add NAME` makes one)",
	}, "")
)

// Config is what the commands read: where Guardian is, and the operator
// token they present.
type Config struct {
	// URL is Guardian's base URL. Defaults to DefaultURL.
	URL string
	// Token is the operator's token.
	Token string
}

// ReadConfig reads the commands' settings from env; token is the token to
// present when GUARDIAN_OPERATOR_TOKEN is unset (the first environment
// admin token, which the server's own settings hold).
func ReadConfig(env *settings.Env, token string) Config {
	return Config{URL: urlSetting.Read(env), Token: cmp.Or(strings.TrimSpace(tokenSetting.Read(env)), token)}
}

// api talks to a running Guardian's operator API.
type api struct {
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

// newAPI checks cfg and returns its API client.
func newAPI(cfg Config) (*api, error) {
	if cfg.Token == "" {
		return nil, errors.New("GUARDIAN_OPERATOR_TOKEN is empty: set your operator token (from `guardian operators add NAME`) for the server in GUARDIAN_URL")
	}
	base := strings.TrimRight(cmp.Or(cfg.URL, DefaultURL), "/")
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("GUARDIAN_URL must be an absolute http(s) URL")
	}
	return &api{base: base, token: cfg.Token, http: &http.Client{Timeout: 30 * time.Second}}, nil
}

// do sends a request and decodes a 2xx answer into out; it returns the raw
// body too, for --json.
func (c *api) do(ctx context.Context, method, path string, in, out any) ([]byte, error) {
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
