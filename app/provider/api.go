package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// API reads one provider's JSON API (its events, for a backfill; one
// event, for PayPal's confirmation): every request to the one configured
// origin, the credentials in a header, never in an error. Safe for
// concurrent use.
type API struct {
	name   string // the provider, for errors
	origin *url.URL
	client *http.Client
}

// NewAPI returns the API of the provider name at apiURL, an absolute
// http(s) URL; only its origin is kept. Redirects are not followed.
func NewAPI(name, apiURL string) (*API, error) {
	u, err := url.Parse(apiURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("%s API: URL %q is not an absolute http(s) URL", name, apiURL)
	}
	return &API{name: name, origin: &url.URL{Scheme: u.Scheme, Host: u.Host}, client: &http.Client{
		Timeout: 30 * time.Second,
		// A redirect could carry the credentials to another host.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}, nil
}

// APIError is a provider API's answer other than 200: the status and the
// provider's own words, never the request.
type APIError struct {
	Provider string
	Status   int
	Detail   string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s answered %d: %s", e.Provider, e.Status, e.Detail)
}

// Throttled reports whether err is a provider API's 429.
func Throttled(err error) bool {
	return apiStatus(err) == http.StatusTooManyRequests
}

// apiStatus is the status of an APIError in err's chain, 0 without one.
func apiStatus(err error) int {
	var aerr *APIError
	if errors.As(err, &aerr) {
		return aerr.Status
	}
	return 0
}

// resolve makes ref (a path, or an absolute link the API answered) a URL
// on the configured origin; a link elsewhere is refused, so the
// credentials never leave it.
func (c *API) resolve(ref string) (string, error) {
	u, err := c.origin.Parse(ref)
	if err != nil || u.Scheme != c.origin.Scheme || u.Host != c.origin.Host {
		return "", fmt.Errorf("%s linked to %q, off its API's origin %s: not followed", c.name, ref, c.origin)
	}
	return u.String(), nil
}

// Do sends a request to ref (a path, or a link the API answered, which
// must be on its origin) with the Authorization header authorization and,
// when form is not nil, the form as its body, and decodes a 200's JSON body
// into into. Any other status is an *APIError.
func (c *API) Do(ctx context.Context, method, ref, authorization string, form url.Values, into any) error {
	target, err := c.resolve(ref)
	if err != nil {
		return err
	}
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", authorization)
	req.Header.Set("Accept", "application/json")
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the URL holds no secret, but keep errors short
		}
		return fmt.Errorf("%s API: %w", c.name, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("%s API: reading the answer: %w", c.name, err)
	}
	if resp.StatusCode != http.StatusOK {
		return &APIError{Provider: c.name, Status: resp.StatusCode, Detail: errorDetail(raw)}
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return fmt.Errorf("%s API: the answer is not the JSON expected: %w", c.name, err)
	}
	return nil
}

// errorDetail keeps a short description from an API's error body: Paddle's
// error.detail, Stripe's error.message, PayPal's message or
// error_description.
func errorDetail(raw []byte) string {
	var e struct {
		Error json.RawMessage `json:"error"`
		Msg   string          `json:"message"`
		Desc  string          `json:"error_description"`
	}
	_ = json.Unmarshal(raw, &e)
	var nested struct{ Code, Detail, Message string }
	_ = json.Unmarshal(e.Error, &nested)
	for _, s := range []string{nested.Detail, nested.Message, nested.Code, e.Msg, e.Desc} {
		if s != "" {
			return truncate(s, 200)
		}
	}
	return "no description"
}
