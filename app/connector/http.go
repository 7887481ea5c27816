package connector

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/receiver/contract"
)

// HTTPConfig configures the HTTP connector.
type HTTPConfig struct {
	// URL receives the POST. Required.
	URL string
	// Secret signs each request with the Standard Webhooks scheme
	// ("whsec_" and base64), so the receiver can verify it. Required.
	Secret string
	// Timeout bounds one call, connection included. Defaults to 30 seconds.
	Timeout time.Duration
	// Transport sends requests. Defaults to a clone of http.DefaultTransport
	// that speaks HTTP/1.1 only and keeps Calls idle connections.
	Transport http.RoundTripper
	// Calls is the most calls this connector makes at once (the process's
	// dispatch workers, every one of which may call any action's
	// receiver): the default transport keeps as many connections to the
	// receiver idle between calls, so that no call of a busy process pays
	// a new handshake. Defaults to DefaultCalls.
	Calls int
	// Now is the clock for signature timestamps. Defaults to time.Now.
	Now func() time.Time
	// LookupURL, when set, answers lookups by idempotency key: "{key}" in it
	// is replaced by the key (see Lookup).
	LookupURL string
	// Rotating are further secrets while the receiver's secret is
	// rotated: each request carries a signature by every secret (Standard
	// Webhooks' space-separated list), so the receiver verifies with
	// either, and a statement signed by any of them counts.
	Rotating []string
}

// HTTP POSTs each fulfilment as JSON to a URL, with the payment's
// Idempotency-Key, the attempt in Guardian-Attempt, and Standard Webhooks
// signature headers (webhook-id is the key: every attempt is the same
// message). Every attempt under a key sends the same bytes.
//
// Outcomes by fact (docs/design.md, "The receiver's contract";
// ClassifyStatus holds the status table): 2xx is Done; a connection that
// was never established is NotSent; a refusal before the receiver's
// business logic (401, 403, 404, 405, 407, 413, 415, 421, 426, 431) is
// NotDelivered; a 4xx carrying the receiver's signed statement that it
// declined the key is Declined; any other 4xx but 408, 409, 425 and 429 is
// Refused (no proof that nothing was done); everything else (409 "in
// progress", timeout, reset, 5xx, a connection lost mid-answer) is Unknown.
//
// One attempt is one request on the wire: the transport speaks HTTP/1.1
// only (Go's HTTP/2 client may resend a request after some stream resets)
// and requests carry no GetBody, so net/http cannot replay a body on a
// connection lost mid-request.
type HTTP struct {
	url       string
	lookupURL string
	signer    *standardwebhooks.Webhook
	rotating  []*standardwebhooks.Webhook
	client    *http.Client
	timeout   time.Duration
	now       func() time.Time
}

// NewHTTP returns an HTTP connector, or an error if the URL or secret is unusable.
func NewHTTP(cfg HTTPConfig) (*HTTP, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("connector URL must be an absolute http(s) URL")
	}
	signer, err := contract.NewSigner(cfg.Secret)
	if err != nil {
		return nil, err
	}
	var rotating []*standardwebhooks.Webhook
	for _, s := range cfg.Rotating {
		r, err := contract.NewSigner(s)
		if err != nil {
			return nil, err
		}
		rotating = append(rotating, r)
	}
	if cfg.Timeout < 0 {
		return nil, errors.New("connector timeout must not be negative")
	}
	if cfg.LookupURL != "" {
		u, err := url.Parse(strings.ReplaceAll(cfg.LookupURL, "{key}", "k"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || !strings.Contains(cfg.LookupURL, "{key}") {
			return nil, errors.New("connector lookup URL must be an absolute http(s) URL containing {key}")
		}
	}
	transport := cfg.Transport
	if transport == nil {
		transport = newTransport(cmp.Or(cfg.Calls, DefaultCalls))
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &HTTP{
		lookupURL: cfg.LookupURL,
		url:       cfg.URL,
		signer:    signer,
		rotating:  rotating,
		client:    &http.Client{Transport: transport, CheckRedirect: noRedirects},
		timeout:   cmp.Or(cfg.Timeout, 30*time.Second),
		now:       now,
	}, nil
}

// DefaultCalls is HTTPConfig.Calls unless set.
const DefaultCalls = 128

// newTransport is the connector's default transport: HTTP/1.1 only, and
// an idle connection for each of calls made at once.
func newTransport(calls int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// Every call goes to one host: keep an idle connection for each call
	// made at once, or each call past them pays a new TCP (and TLS)
	// handshake and leaves a socket in TIME_WAIT. net/http keeps two.
	t.MaxIdleConnsPerHost = calls
	t.MaxIdleConns = max(t.MaxIdleConns, calls)
	// No HTTP/2: its client retries a request by itself after a GOAWAY or
	// some stream resets, and one attempt could reach the receiver twice. A
	// non-nil empty TLSNextProto is net/http's documented way to turn it
	// off.
	t.ForceAttemptHTTP2 = false
	t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	return t
}

// A redirect would resend the action elsewhere: answer with the 3xx instead,
// which classifies as Unknown.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// maxEvidenceBody is how much of an answer is kept as evidence.
const maxEvidenceBody = 512

// Fulfil sends one attempt and classifies its outcome.
func (c *HTTP) Fulfil(ctx context.Context, r Request) Result {
	start := time.Now()
	body, err := EncodeRequest(r)
	if err != nil {
		return notSent("encode request: "+err.Error(), map[string]any{})
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	var connected atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { connected.Store(true) },
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return notSent("build request: "+err.Error(), map[string]any{})
	}
	// Without GetBody no transport can rewind the body and send it again.
	req.GetBody = nil
	if err := c.sign(req, r.Key, r.Key, body); err != nil {
		return notSent("sign request", map[string]any{})
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(contract.HeaderAttempt, strconv.Itoa(r.Attempt))

	if ctx.Err() != nil {
		// The deadline passed before a byte left (a dispatcher that stalled
		// after its claim): do not send late.
		return notSent("deadline passed before sending", map[string]any{"attempt": r.Attempt, "connected": false})
	}
	resp, err := c.client.Do(req)
	evidence := map[string]any{"attempt": r.Attempt, "duration_ms": time.Since(start).Milliseconds()}
	if err != nil {
		class := errorEvidence(evidence, err)
		if !connected.Load() {
			// No connection was ever established: not a byte of the request
			// left this process.
			evidence["connected"] = false
			return notSent(class, evidence)
		}
		return Result{Outcome: state.Unknown, Error: class, Evidence: evidence}
	}
	defer resp.Body.Close()
	answer, readErr := io.ReadAll(io.LimitReader(resp.Body, maxStatement))
	evidence["status"] = resp.StatusCode
	if len(answer) > 0 {
		evidence["body"] = string(answer[:min(len(answer), maxEvidenceBody)])
	}
	outcome := ClassifyStatus(resp.StatusCode)
	var class string
	if readErr != nil && outcome != state.Done {
		class = errorEvidence(evidence, readErr)
	}
	if outcome == state.Refused {
		// A refusal frees the payment only on the receiver's signed word.
		st, why := c.statement(answer, resp.Header, r.Key)
		if st.Status == contract.StatusDeclined {
			outcome = state.Declined
			evidence["declined_reason"] = st.Reason
		} else if why != "" {
			evidence["statement"] = why
		} else {
			evidence["statement"] = st.Status
		}
	}
	return Result{Outcome: outcome, Status: resp.StatusCode, Error: class, Evidence: evidence}
}

// notSent is the Result of a request that provably never left, and why,
// which evidence shows as its "error".
func notSent(why string, evidence map[string]any) Result {
	evidence["error"] = why
	return Result{Outcome: state.NotSent, Error: why, Evidence: evidence}
}

// EncodeRequest writes a call's JSON body (Body) with the event's payload
// embedded byte for byte, as the provider signed it: json.Marshal would
// compact and HTML-escape a json.RawMessage. The same request always gives
// the same bytes.
func EncodeRequest(r Request) ([]byte, error) {
	payload := []byte(r.Payload)
	if len(payload) == 0 {
		payload = []byte("null")
	}
	if !json.Valid(payload) {
		return nil, errors.New("payload is not JSON")
	}
	var action string // a fulfilment's body names no action
	if r.Action == state.Revoke {
		action = contract.ActionRevoke
	}
	head, err := json.Marshal(contract.Body{IdempotencyKey: r.Key, Provider: r.Provider, PaymentID: r.PaymentID, EventID: r.EventID, EventType: r.EventType,
		Action: action, ActionName: r.ActionName, Purchase: r.Purchase, Payload: json.RawMessage("0")})
	if err != nil {
		return nil, err
	}
	head = head[:len(head)-len(`0}`)] // without the placeholder and the closing brace
	out := make([]byte, 0, len(head)+len(payload)+1)
	out = append(out, head...)
	out = append(out, payload...)
	return append(out, '}'), nil
}

// sign sets the Standard Webhooks headers for body under msgID, and the
// Idempotency-Key, on req.
func (c *HTTP) sign(req *http.Request, msgID, key string, body []byte) error {
	now := c.now()
	h, err := contract.SignHeaders(c.signer, msgID, body, now)
	if err != nil {
		return err
	}
	for _, r := range c.rotating {
		more, err := contract.SignHeaders(r, msgID, body, now)
		if err != nil {
			return err
		}
		sig := standardwebhooks.HeaderWebhookSignature
		h.Set(sig, h.Get(sig)+" "+more.Get(sig))
	}
	for k, v := range h {
		req.Header[k] = v
	}
	// Set under a non-canonical map key on purpose: net/http treats a POST
	// carrying "Idempotency-Key" as replayable and may resend it on a reused
	// connection, which would break "at most once per attempt". Header names
	// are case-insensitive on the wire, so the receiver sees the same header.
	req.Header["idempotency-key"] = []string{key}
	return nil
}

// notDelivered lists the answers that say a request was refused before it
// reached the receiver's business logic: authentication (401, 403, 407),
// routing (404, 405, 421) and transport (413, 415, 426, 431). A receiver
// whose clock drifted, an ingress that lost a route or a rotated secret
// answers these for every payment; none is the receiver's word on one.
var notDelivered = map[int]bool{
	http.StatusUnauthorized: true, http.StatusForbidden: true, http.StatusProxyAuthRequired: true,
	http.StatusNotFound: true, http.StatusMethodNotAllowed: true, http.StatusMisdirectedRequest: true,
	http.StatusRequestEntityTooLarge: true, http.StatusUnsupportedMediaType: true,
	http.StatusUpgradeRequired: true, http.StatusRequestHeaderFieldsTooLarge: true,
}

// ClassifyStatus maps an HTTP status alone to an outcome: the table in
// docs/design.md ("The receiver's contract").
//
//   - 2xx: Done.
//   - 401, 403, 404, 405, 407, 413, 415, 421, 426, 431: NotDelivered, retried
//     with backoff and never terminal.
//   - 408, 409, 425, 429: Unknown (409: a request with this key is still
//     being processed; the others: the receiver may have started).
//   - any other 4xx (400, 402, 410, 422, ...): Refused. With the receiver's
//     signed statement that it declined the key, Fulfil makes it Declined.
//   - everything else (1xx, 3xx, 5xx): Unknown.
func ClassifyStatus(code int) state.Outcome {
	switch {
	case code/100 == 2:
		return state.Done
	case notDelivered[code]:
		return state.NotDelivered
	case code == http.StatusRequestTimeout, code == http.StatusConflict, code == http.StatusTooEarly, code == http.StatusTooManyRequests:
		return state.Unknown
	case code/100 == 4:
		return state.Refused
	default:
		return state.Unknown
	}
}

// Error classes name why a call got no answer. They are a closed set, so
// they may label metrics; the detail (which may name internal hosts) goes
// only into evidence, under "detail".
const (
	ClassTimeout          = "timeout"
	ClassCancelled        = "cancelled"
	ClassConnectionClosed = "connection_closed"
	ClassRefused          = "refused"
	ClassReset            = "reset"
	ClassDNS              = "dns"
	ClassTLS              = "tls"
	ClassTransport        = "transport"
)

// ErrorClasses lists every class errorEvidence may give.
var ErrorClasses = []string{ClassTimeout, ClassCancelled, ClassConnectionClosed, ClassRefused, ClassReset, ClassDNS, ClassTLS, ClassTransport}

// errorEvidence records err as its class ("error") and, for network errors,
// the operation and cause ("detail"), without URLs or secrets; it returns
// the class.
func errorEvidence(evidence map[string]any, err error) string {
	class := classifyError(err)
	evidence["error"] = class
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		evidence["detail"] = fmt.Sprintf("%s: %v", opErr.Op, opErr.Err)
	}
	return class
}

// classifyError names an error's class, one of ErrorClasses.
func classifyError(err error) string {
	var (
		netErr   net.Error
		dnsErr   *net.DNSError
		tlsErr   *tls.RecordHeaderError
		certErr  *tls.CertificateVerificationError
		alertErr tls.AlertError
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return ClassTimeout
	case errors.Is(err, context.Canceled):
		return ClassCancelled
	case errors.As(err, &netErr) && netErr.Timeout():
		return ClassTimeout
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return ClassConnectionClosed
	case errors.Is(err, syscall.ECONNREFUSED):
		return ClassRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return ClassReset
	case errors.As(err, &dnsErr):
		return ClassDNS
	case errors.As(err, &tlsErr), errors.As(err, &certErr), errors.As(err, &alertErr):
		return ClassTLS
	}
	return ClassTransport
}

// CanLookup reports whether a lookup URL is configured.
func (c *HTTP) CanLookup() bool { return c.lookupURL != "" }

// Lookup asks GET {lookup URL with {key} replaced} what was done for key.
// The request is signed like a fulfilment, over an empty body.
//
// Only an explicit, authenticated answer decides: a 200 whose body is a
// Statement about this key, signed by the receiver with the connector
// secret (SignStatement), and fresh. "done" is Performed, "not_done"
// NotPerformed, "in_progress" InProgress and "declined" Declined. Anything
// else (a bare 404 from an ingress or a mistyped path, an unsigned or stale
// answer, another key, an error) is CannotTell: "not done" sends the
// payment again, so it is never inferred.
func (c *HTTP) Lookup(ctx context.Context, key string) (Answer, map[string]any, error) {
	if c.lookupURL == "" {
		return CannotTell, nil, errors.New("no lookup URL configured")
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	target := strings.ReplaceAll(c.lookupURL, "{key}", url.PathEscape(key))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return CannotTell, nil, errors.New("build lookup request")
	}
	if err := c.sign(req, key+".lookup", key, nil); err != nil {
		return CannotTell, nil, errors.New("sign lookup request")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return CannotTell, map[string]any{"lookup_error": classifyError(err)}, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxStatement))
	evidence := map[string]any{"lookup_status": resp.StatusCode}
	if len(body) > 0 {
		evidence["lookup_body"] = string(body[:min(len(body), maxEvidenceBody)])
	}
	if resp.StatusCode != http.StatusOK {
		return CannotTell, evidence, nil
	}
	st, why := c.statement(body, resp.Header, key)
	if why != "" {
		evidence["lookup_unverified"] = why
		return CannotTell, evidence, nil
	}
	switch st.Status {
	case contract.StatusDone:
		return Performed, evidence, nil
	case contract.StatusNotDone:
		return NotPerformed, evidence, nil
	case contract.StatusInProgress:
		return InProgress, evidence, nil
	case contract.StatusDeclined:
		if st.Reason != "" {
			evidence["declined_reason"] = st.Reason
		}
		return Declined, evidence, nil
	}
	return CannotTell, evidence, nil
}
