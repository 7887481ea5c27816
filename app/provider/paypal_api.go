package provider

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// PayPalAPI is PayPal's REST API as Guardian reads it: an access token got
// with a REST app's credentials and kept until a minute before it expires,
// and the webhook events PayPal lists and shows. Safe for concurrent use.
type PayPalAPI struct {
	api              *API
	clientID, secret string

	mu    sync.Mutex
	token string
	until time.Time
}

// NewPayPalAPI returns PayPal's API at apiURL (https://api-m.paypal.com
// when empty; the sandbox's, or a test's fake) with a REST app's
// credentials, which are never logged.
func NewPayPalAPI(clientID, secret, apiURL string) (*PayPalAPI, error) {
	if clientID == "" || secret == "" {
		return nil, errors.New("paypal API: client id and secret are required")
	}
	api, err := NewAPI("paypal", cmp.Or(apiURL, PayPalAPIURL))
	if err != nil {
		return nil, err
	}
	return &PayPalAPI{api: api, clientID: clientID, secret: secret}, nil
}

// Authorization returns the Authorization header of an API request: a
// bearer token, from the cache or got now.
func (p *PayPalAPI) Authorization(ctx context.Context) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.token != "" && time.Now().Before(p.until) {
		return "Bearer " + p.token, nil
	}
	var token struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
	}
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte(p.clientID+":"+p.secret))
	if err := p.api.Do(ctx, "POST", "/v1/oauth2/token", basic, url.Values{"grant_type": {"client_credentials"}}, &token); err != nil {
		return "", err
	}
	if token.AccessToken == "" {
		return "", errors.New("paypal API: the token answer holds no access_token")
	}
	p.token, p.until = token.AccessToken, time.Now().Add(time.Duration(token.ExpiresIn)*time.Second-time.Minute)
	return "Bearer " + p.token, nil
}

// Get reads path with the Authorization auth into out. PayPal answering 401 drops
// that token from the cache, so the next request gets a new one: a token
// revoked, or credentials rotated, would otherwise refuse every request
// until the token's own expiry, hours later.
func (p *PayPalAPI) Get(ctx context.Context, auth, path string, out any) error {
	err := p.api.Do(ctx, "GET", path, auth, nil, out)
	if apiStatus(err) == http.StatusUnauthorized {
		p.mu.Lock()
		if "Bearer "+p.token == auth {
			p.token = ""
		}
		p.mu.Unlock()
	}
	return err
}

// Event returns PayPal's own copy of a webhook event (GET
// /v1/notifications/webhooks-events/{id}), for PayPalConfig.Event.
// PayPal answering 404 is an error of its own (no such event); one that
// does not answer, answers 5xx or 429, or refuses the credentials wraps
// ErrUnavailable, so the delivery is answered 503 and PayPal
// retries it.
func (p *PayPalAPI) Event(ctx context.Context, id string) ([]byte, error) {
	auth, err := p.Authorization(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	var raw json.RawMessage
	err = p.Get(ctx, auth, "/v1/notifications/webhooks-events/"+url.PathEscape(id), &raw)
	switch {
	case apiStatus(err) == http.StatusNotFound:
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return raw, nil
}
