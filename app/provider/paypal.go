package provider

import (
	"cmp"
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/guardian-pay/guardian/app/settings"
)

// The hosts PayPal serves its message-verification certificates from, and
// the name each certificate carries: a live one, and a sandbox one.
var payPalCertHosts = map[string]payPalEnv{
	"api.paypal.com":           {sandbox: false, certName: "messageverificationcerts.paypal.com"},
	"api-m.paypal.com":         {sandbox: false, certName: "messageverificationcerts.paypal.com"},
	"api.sandbox.paypal.com":   {sandbox: true, certName: "messageverificationcerts.sandbox.paypal.com"},
	"api-m.sandbox.paypal.com": {sandbox: true, certName: "messageverificationcerts.sandbox.paypal.com"},
}

type payPalEnv struct {
	sandbox  bool
	certName string
}

// payPalCertPath starts the path of every certificate URL PayPal sends.
const payPalCertPath = "/v1/notifications/certs/"

// PayPal's fulfilling event: a capture that completed.
const PayPalFulfilEvent = "PAYMENT.CAPTURE.COMPLETED"

// PayPalRuleTypes are the events PayPal's rules read: the fulfilling one,
// and the refunds, reversals and disputes. A backfill lists these.
var PayPalRuleTypes = []string{PayPalFulfilEvent, "PAYMENT.CAPTURE.REFUNDED", "PAYMENT.CAPTURE.REVERSED",
	"CUSTOMER.DISPUTE.CREATED", "CUSTOMER.DISPUTE.RESOLVED",
	payPalSubscriptionStart, "BILLING.SUBSCRIPTION.CANCELLED", "BILLING.SUBSCRIPTION.EXPIRED", "BILLING.SUBSCRIPTION.SUSPENDED",
	"PAYMENT.SALE.COMPLETED", "PAYMENT.SALE.REFUNDED", "PAYMENT.SALE.REVERSED"}

// payPalSubscriptionStart is the event that starts a PayPal subscription:
// its activation, on which PayPal's subscription integration provisions.
const payPalSubscriptionStart = "BILLING.SUBSCRIPTION.ACTIVATED"

// Bounds of the certificate fetches, which an anonymous request can ask
// for: the cache holds maxPayPalCerts certificates (PayPal rotates its
// certificate every year or so, so a handful of URLs is all a deployment
// sees) and maxPayPalCerts failures, each for payPalFailureTTL (a PayPal
// that did not answer for payPalUnavailableTTL, so it is asked again soon
// once it is back, and a flood meanwhile fetches nothing); at most
// maxPayPalFetches fetches run at once, and a request that would start
// another is answered ErrUnavailable (503) at once, never held.
const (
	maxPayPalCerts       = 16
	maxPayPalFetches     = 4
	payPalFailureTTL     = time.Minute
	payPalUnavailableTTL = 5 * time.Second
	// maxPayPalConfirms bounds the events confirmed with PayPal's API at
	// once; beyond it a delivery is answered 503 and PayPal retries.
	maxPayPalConfirms = 8
)

// PayPalConfig configures PayPal's verification and rules.
type PayPalConfig struct {
	// WebhookIDs are the ids of the webhooks whose deliveries this endpoint
	// takes, as the developer dashboard shows them: PayPal signs the id
	// into every transmission, so a delivery meant for another webhook
	// does not verify. At least one.
	WebhookIDs []string
	// Tolerance bounds the signed transmission time both ways. Defaults to
	// DefaultTolerance.
	Tolerance time.Duration
	// Mode is the money the deployment serves: a delivery signed by the
	// sandbox's certificate at a live deployment is refused (ErrMode), and
	// the other way round. The zero Mode checks nothing.
	Mode Mode
	// Fetch gets a certificate's PEM from its URL, which is always https
	// on one of PayPal's hosts. Nil fetches it with Go's TLS verification,
	// no redirects, within 10 seconds. Tests give their own.
	Fetch func(ctx context.Context, url string) ([]byte, error)
	// Event, when set, gets PayPal's own copy of a webhook event by its id
	// (GET /v1/notifications/webhooks-events/{id} with the REST app's
	// credentials: backfill.PayPalAPI.Event). PayPal's signature binds the
	// body only by a CRC32, which anyone can match with a body of their
	// choice, so with Event set a delivery that would decide anything
	// (pays, refunds, disputes, or is flagged) is read and stored as
	// PayPal's API shows it, never as delivered. An error wrapping
	// ErrUnavailable is answered 503, so PayPal retries; any other means
	// PayPal knows no such event, and the delivery is refused. Nil trusts
	// the delivered body, bound to its transmission id (Confirms).
	Event func(ctx context.Context, id string) ([]byte, error)
	// API, when set, is PayPal's API with a REST app's credentials: Event
	// defaults to its Event, and the backfill lists from it (API), under
	// one access token.
	API *PayPalAPI
	// FulfilRenewals makes each completed sale of a subscription
	// (PAYMENT.SALE.COMPLETED naming its billing_agreement_id) a renewal:
	// a purchase of its own, the sale, once. Off by default, as Stripe's
	// and Paddle's renewals are: the activation fulfils.
	FulfilRenewals bool
}

// PayPal verifies PayPal's webhook deliveries. PAYPAL-TRANSMISSION-SIG is
// an RSA-SHA256 (PKCS #1 v1.5) signature, by the key of PayPal's
// message-verification certificate at PAYPAL-CERT-URL, of the transmission
// id, the transmission time, the webhook's id and the decimal CRC32 of the
// exact body, joined by "|". The certificate is fetched only from PayPal's
// own API hosts over https, checked to name PayPal's message-verification
// service for that host's environment and to be valid at the delivery's
// time, and cached by URL.
//
// The rules, by PayPal's documentation (docs/design.md, the rule table):
// the event's own id dedupes; PAYMENT.CAPTURE.COMPLETED with the capture's
// status COMPLETED fulfils, its payment the capture (resource.id);
// CHECKOUT.ORDER.APPROVED (approved, not paid) and PAYMENT.CAPTURE.PENDING
// never do.
type PayPal struct {
	webhookIDs     []string
	tolerance      time.Duration
	mode           Mode
	fulfilRenewals bool
	api            *PayPalAPI
	fetch          func(ctx context.Context, url string) ([]byte, error)
	event          func(ctx context.Context, id string) ([]byte, error)
	// confirming bounds the confirmations in flight (maxPayPalConfirms).
	confirming chan struct{}

	mu       sync.Mutex
	certs    map[string]*x509.Certificate
	failed   map[string]certFailure
	inflight map[string]*certCall
}

// certFailure is a fetch that failed, answered again without fetching
// until its time is up.
type certFailure struct {
	err   error
	until time.Time
}

// certCall is one certificate fetch that concurrent deliveries share.
type certCall struct {
	done chan struct{}
	cert *x509.Certificate
	err  error
}

// NewPayPal returns a PayPal provider, or an error if no webhook id is
// given.
func NewPayPal(cfg PayPalConfig) (*PayPal, error) {
	ids, err := cleanSecrets(cfg.WebhookIDs)
	if err != nil {
		return nil, errors.New("paypal: no webhook id configured")
	}
	if err := cfg.Mode.check("paypal"); err != nil {
		return nil, err
	}
	if cfg.Tolerance < 0 {
		return nil, errors.New("paypal: negative tolerance")
	}
	p := &PayPal{webhookIDs: ids, tolerance: cmp.Or(cfg.Tolerance, DefaultTolerance), mode: cfg.Mode, fetch: cfg.Fetch, fulfilRenewals: cfg.FulfilRenewals,
		event: cfg.Event, api: cfg.API, confirming: make(chan struct{}, maxPayPalConfirms),
		certs: map[string]*x509.Certificate{}, failed: map[string]certFailure{}, inflight: map[string]*certCall{}}
	if p.fetch == nil {
		p.fetch = fetchOverHTTPS
	}
	if p.event == nil && p.api != nil {
		p.event = p.api.Event
	}
	return p, nil
}

// API returns PayPal's API when the provider was given one (PayPalConfig.API), else nil.
func (p *PayPal) API() *PayPalAPI { return p.api }

// Name returns "paypal".
func (p *PayPal) Name() string { return "paypal" }

// Verify checks the transmission's signature and time and reads the event.
// A certificate that cannot be fetched now is ErrUnavailable: PayPal
// retries, and nothing is stored.
func (p *PayPal) Verify(header http.Header, body []byte, now time.Time) (Event, error) {
	id, sent := header.Get("Paypal-Transmission-Id"), header.Get("Paypal-Transmission-Time")
	sig, err := base64.StdEncoding.DecodeString(header.Get("Paypal-Transmission-Sig"))
	if id == "" || sent == "" || err != nil || len(sig) == 0 {
		return Event{}, fmt.Errorf("%w: missing or unreadable PAYPAL-TRANSMISSION-ID, -TIME or -SIG header", ErrSignature)
	}
	if algo := header.Get("Paypal-Auth-Algo"); algo != "SHA256withRSA" {
		return Event{}, fmt.Errorf("%w: PAYPAL-AUTH-ALGO is not SHA256withRSA", ErrSignature)
	}
	certURL, env, err := payPalCertURL(header.Get("Paypal-Cert-Url"))
	if err != nil {
		return Event{}, err
	}
	at, err := time.Parse(time.RFC3339, sent)
	if err != nil {
		return Event{}, fmt.Errorf("%w: PAYPAL-TRANSMISSION-TIME is not an RFC 3339 time", ErrSignature)
	}
	if err := checkTimestamp(at, now, p.tolerance); err != nil {
		return Event{}, err
	}
	cert, err := p.certificate(certURL, env)
	if err != nil {
		return Event{}, err
	}
	if at.Before(cert.NotBefore) || at.After(cert.NotAfter) {
		return Event{}, fmt.Errorf("%w: the certificate was not valid at the transmission time", ErrSignature)
	}
	if !payPalSigned(cert.PublicKey.(*rsa.PublicKey), id, sent, p.webhookIDs, body, sig) {
		return Event{}, ErrSignature
	}
	if err := p.mode.refusal(env.sandbox, "a sandbox delivery", "a live delivery", "a sandbox webhook's id in GUARDIAN_PAYPAL_WEBHOOK_IDS"); err != nil {
		return Event{}, err
	}
	ev, err := p.Read(body)
	if err != nil {
		return Event{}, err
	}
	// The signature binds the body by CRC32 only: bind the body to the
	// transmission, and take what decides from PayPal's own copy.
	ev.Transmission = &Transmission{ID: id, BodySHA256: sha256.Sum256(body)}
	return p.confirm(ev)
}

// Confirms reports whether deliveries are confirmed with PayPal's API
// (PayPalConfig.Event). Without it, a delivered body is trusted as signed,
// bound to its transmission id: anyone who holds a delivery less than the
// tolerance old, before Guardian has seen it, can put another body under
// its signature.
func (p *PayPal) Confirms() bool { return p.event != nil }

// confirm replaces a delivered event that decides anything (pays,
// reverses, resumes a subscription, states one of its payments, or is
// flagged) with PayPal's own copy of it, from PayPal's API
// (PayPalConfig.Event), keeping the delivery's transmission. The copy must be the same event: its id and
// type.
func (p *PayPal) confirm(ev Event) (Event, error) {
	if p.event == nil || (!ev.Fulfils() && ev.Reversal == nil && ev.Resumes == "" && ev.Invoice == nil && ev.Unmapped == "") {
		return ev, nil
	}
	if !payPalEventID(ev.ID) {
		return Event{}, fmt.Errorf("%w: the event id is not one of PayPal's", ErrMalformed)
	}
	select {
	case p.confirming <- struct{}{}:
		defer func() { <-p.confirming }()
	default:
		return Event{}, fmt.Errorf("%w: %d confirmations with PayPal's API already in flight", ErrUnavailable, maxPayPalConfirms)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := p.event(ctx, ev.ID)
	if errors.Is(err, ErrUnavailable) {
		return Event{}, err
	}
	if err != nil {
		return Event{}, fmt.Errorf("%w: PayPal's API does not confirm the event: %v", ErrSignature, err)
	}
	own, err := p.Read(raw)
	if err != nil {
		return Event{}, fmt.Errorf("%w: PayPal's API answered an event Guardian cannot read: %v", ErrUnavailable, err)
	}
	if own.ID != ev.ID || own.Type != ev.Type {
		return Event{}, fmt.Errorf("%w: the delivery is not the event PayPal's API shows under its id", ErrSignature)
	}
	own.Transmission = ev.Transmission
	return own, nil
}

// payPalEventID reports whether id looks like a PayPal webhook event id
// (WH-58D329510W468432D-8HN650336L201105X): letters, digits and dashes.
func payPalEventID(id string) bool {
	return id != "" && len(id) <= 128 && strings.Trim(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-") == ""
}

// Read reads an event PayPal's API listed (GET
// /v1/notifications/webhooks-events) as Verify reads a delivery it
// verified: the backfill's way in. The caller vouches for the body: it
// came from PayPal's API over TLS with the merchant's credentials.
func (p *PayPal) Read(body []byte) (Event, error) {
	doc, err := parseObject(body)
	if err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	eventID, _ := doc["id"].(string)
	eventType, _ := doc["event_type"].(string)
	if eventID == "" || eventType == "" {
		return Event{}, fmt.Errorf("%w: id and event_type are required", ErrMalformed)
	}
	if len(eventID) > maxIDLength || len(eventType) > maxIDLength {
		return Event{}, fmt.Errorf("%w: id or event_type too long to be real", ErrMalformed)
	}
	if hasNUL(eventID, eventType) {
		return Event{}, errNUL
	}
	resource, _ := doc["resource"].(map[string]any)
	return p.rules(Event{Provider: p.Name(), ID: eventID, Type: eventType, Payload: body}, resource), nil
}

// Map applies PayPal's rules to a stored body (Mapper).
func (p *PayPal) Map(eventType string, body []byte) (Event, error) {
	env, err := parseObject(body)
	if err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	resource, _ := env["resource"].(map[string]any)
	return p.rules(Event{Provider: p.Name(), Type: eventType, Payload: body}, resource), nil
}

// rules applies the rule for "paid" to ev, and reads a reversal, a
// subscription's start, standing or end, or its renewal.
func (p *PayPal) rules(ev Event, resource map[string]any) Event {
	if strings.HasPrefix(ev.Type, "BILLING.SUBSCRIPTION.") {
		return payPalSubscription(ev, resource)
	}
	if ev.Type == "PAYMENT.SALE.COMPLETED" {
		return payPalSale(ev, resource, p.fulfilRenewals)
	}
	if ev.Type != PayPalFulfilEvent {
		ev.Reversal, ev.Note = payPalReversal(ev.Type, resource)
		return ev
	}
	status, _ := resource["status"].(string)
	capture, _ := resource["id"].(string)
	switch {
	case status != "COMPLETED":
		ev.Note = "capture status is " + strconv.Quote(truncate(status, 40)) + ", not COMPLETED"
	case capture == "" || len(capture) > maxIDLength || hasNUL(capture):
		// Well signed, so stored and acknowledged; it cannot fulfil.
		ev.Unmapped = "no string capture id at resource.id"
	default:
		ev.PaymentID = capture
		amount, _ := resource["amount"].(map[string]any)
		ev.Paid = decimalMoney(amount["value"], amount["currency_code"])
		ev.Purchase = payPalPurchase(ev, resource)
	}
	return ev
}

// payPalSubscription reads a subscription's event (docs/design.md,
// "Subscriptions"). A PayPal subscription has no checkout object of its
// own: its purchase is the subscription (I-...), started by its
// activation (status ACTIVE: approved, its first cycle or trial begun, as
// PayPal's integration guide provisions), and ended when it is cancelled
// (PayPal ends a cancelled subscription at once) or expires. A suspension
// (failed payments past the plan's threshold, or the merchant's) can be
// reactivated: no end, but a suspension, and its activation again says it
// is active, each at its status_update_time. Each cycle's payment is a
// sale (payPalSale). Each cycle's PAYMENT.SALE.COMPLETED is stored and
// fulfils nothing: PayPal's renewals are not purchases of their own here.
func payPalSubscription(ev Event, resource map[string]any) Event {
	id := prefixedID(resource["id"], "I-")
	status, _ := resource["status"].(string)
	switch {
	case id == "":
		ev.Note = "names no subscription Guardian can read"
	case ev.Type == payPalSubscriptionStart && status == "ACTIVE":
		ev.PaymentID, ev.Subscription = id, id
		p := &Purchase{Provider: ev.Provider, ID: id, Kind: SubscriptionStart}
		billing, _ := resource["billing_info"].(map[string]any)
		last, _ := billing["last_payment"].(map[string]any)
		amount, _ := last["amount"].(map[string]any)
		if ev.Paid = decimalMoney(amount["value"], amount["currency_code"]); ev.Paid != nil {
			minor := ev.Paid.Minor
			p.Amount, p.Currency = &minor, ev.Paid.Currency
		}
		p.Metadata = metadata(map[string]any{"custom_id": resource["custom_id"], "plan_id": resource["plan_id"]})
		subscriber, _ := resource["subscriber"].(map[string]any)
		p.Customer = customer(text(subscriber["payer_id"]), text(subscriber["email_address"]))
		ev.Purchase = p
		ev.Resumes = id
	case ev.Type == "BILLING.SUBSCRIPTION.SUSPENDED" && status == "SUSPENDED":
		ev.Reversal = &Reversal{Kind: Suspension, Subscription: id, Standing: Paused}
	case (ev.Type == "BILLING.SUBSCRIPTION.CANCELLED" && status == "CANCELLED") || (ev.Type == "BILLING.SUBSCRIPTION.EXPIRED" && status == "EXPIRED"):
		ev.Reversal = &Reversal{Kind: End, Subscription: id}
	default:
		ev.Note = "subscription " + strconv.Quote(truncate(status, 40)) + ": neither started nor ended by this event"
	}
	if at, err := time.Parse(time.RFC3339Nano, text(resource["status_update_time"])); err == nil && (ev.Resumes != "" || ev.Reversal != nil) {
		ev.StandingAt = at
	}
	return ev
}

// payPalSale reads a completed sale, PayPal's payment of a subscription's
// cycle: with renewals fulfilling, a sale naming its subscription
// (billing_agreement_id) and completed is a renewal, the sale its
// purchase, once. PayPal's sale does not say which cycle it pays: the
// first cycle's sale, paid with the activation, is a renewal too, so
// route what each period earns by kind (renewal) and what the
// subscription grants by its start (subscription_start). A sale refunded
// or reversed names the sale (payPalReversal).
func payPalSale(ev Event, resource map[string]any, renewals bool) Event {
	sale, sub := text(resource["id"]), prefixedID(resource["billing_agreement_id"], "I-")
	state, _ := resource["state"].(string)
	readable := sale != "" && len(sale) <= maxIDLength && !hasNUL(sale)
	if sub != "" && state == "completed" && readable {
		// One of the subscription's payments, named by itself; which
		// cycle it pays the sale does not say, so it is never the first.
		ev.Invoice = &Invoice{ID: sale, Payment: sale, Subscription: sub}
	}
	switch {
	case sub == "":
		ev.Note = "a sale of no subscription: PayPal's captures pay for purchases"
	case !renewals:
		ev.Note = "a subscription's cycle payment: renewals fulfil only when configured"
	case state != "completed":
		ev.Note = "sale state is " + strconv.Quote(truncate(state, 40)) + ", not completed"
	case !readable:
		ev.Unmapped = "no string sale id at resource.id"
	default:
		ev.PaymentID = sale
		amount, _ := resource["amount"].(map[string]any)
		ev.Paid = decimalMoney(amount["total"], amount["currency"])
		p := basePurchase(ev)
		p.Kind = Renewal
		p.Metadata = metadata(map[string]any{"custom": resource["custom"], "billing_agreement_id": resource["billing_agreement_id"]})
		ev.Purchase = p
	}
	return ev
}

// payPalPurchase reads what a completed capture says of its purchase: the
// merchant's custom_id and invoice_id, which the purchase unit carried
// into the capture, as metadata. A capture lists no items, names no payer
// and does not say whether it is a one-time payment.
func payPalPurchase(ev Event, resource map[string]any) *Purchase {
	p := basePurchase(ev)
	p.Metadata = metadata(map[string]any{"custom_id": resource["custom_id"], "invoice_id": resource["invoice_id"]})
	return p
}

// payPalSigned reports whether sig is the certificate key's signature of
// the transmission for any of the webhook ids.
func payPalSigned(key *rsa.PublicKey, id, sent string, webhookIDs []string, body, sig []byte) bool {
	crc := strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10)
	for _, w := range webhookIDs {
		digest := sha256.Sum256([]byte(id + "|" + sent + "|" + w + "|" + crc))
		if rsa.VerifyPKCS1v15(key, crypto.SHA256, digest[:], sig) == nil {
			return true
		}
	}
	return false
}

// payPalCertURL checks that raw is a certificate URL of PayPal's: https,
// one of PayPal's API hosts, no credentials, port, query or fragment, and
// the certificates path. Anything else is ErrSignature, and nothing is
// fetched.
func payPalCertURL(raw string) (string, payPalEnv, error) {
	u, err := url.Parse(raw)
	bad := fmt.Errorf("%w: PAYPAL-CERT-URL is not a certificate URL of PayPal's (https://api.paypal.com%s...)", ErrSignature, payPalCertPath)
	if err != nil || u.Scheme != "https" || u.User != nil || u.Port() != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", payPalEnv{}, bad
	}
	env, ok := payPalCertHosts[u.Hostname()]
	name, found := strings.CutPrefix(u.EscapedPath(), payPalCertPath)
	if !ok || !found || !payPalCertName(name) {
		return "", payPalEnv{}, bad
	}
	return u.String(), env, nil
}

// payPalCertName reports whether name is a certificate's name in PayPal's
// own format, "CERT-" and three groups of eight lower-case hex digits
// (CERT-360caa42-fca2a594-1d93a270): only such a name is ever fetched.
func payPalCertName(name string) bool {
	rest, ok := strings.CutPrefix(name, "CERT-")
	if !ok || len(rest) != 26 {
		return false
	}
	for i, c := range rest {
		if i == 8 || i == 17 {
			if c != '-' {
				return false
			}
		} else if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// certificate returns the certificate at url: from the cache, or a
// failure from the failure cache, or fetched once however many deliveries
// ask at the same time; beyond maxPayPalFetches fetches at once,
// ErrUnavailable without fetching.
func (p *PayPal) certificate(url string, env payPalEnv) (*x509.Certificate, error) {
	p.mu.Lock()
	if c, ok := p.certs[url]; ok {
		p.mu.Unlock()
		return c, nil
	}
	if f, ok := p.failed[url]; ok && time.Now().Before(f.until) {
		p.mu.Unlock()
		return nil, f.err
	}
	call, ok := p.inflight[url]
	if !ok {
		if len(p.inflight) >= maxPayPalFetches {
			p.mu.Unlock()
			return nil, fmt.Errorf("%w: %d certificate fetches already in flight", ErrUnavailable, maxPayPalFetches)
		}
		call = &certCall{done: make(chan struct{})}
		p.inflight[url] = call
		go func() {
			call.cert, call.err = p.load(url, env)
			p.mu.Lock()
			delete(p.inflight, url)
			if call.err == nil {
				if len(p.certs) >= maxPayPalCerts {
					clear(p.certs)
				}
				p.certs[url] = call.cert
				delete(p.failed, url)
			} else {
				if len(p.failed) >= maxPayPalCerts {
					clear(p.failed)
				}
				ttl := payPalFailureTTL
				if errors.Is(call.err, ErrUnavailable) {
					ttl = payPalUnavailableTTL
				}
				p.failed[url] = certFailure{err: call.err, until: time.Now().Add(ttl)}
			}
			p.mu.Unlock()
			close(call.done)
		}()
	}
	p.mu.Unlock()
	<-call.done
	return call.cert, call.err
}

// load fetches and checks one certificate: the first of the PEM, naming
// env's message-verification service, with an RSA key.
func (p *PayPal) load(url string, env payPalEnv) (*x509.Certificate, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := p.fetch(ctx, url)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(raw)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%w: the certificate URL did not answer a PEM certificate", ErrSignature)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: the certificate could not be read", ErrSignature)
	}
	if cert.VerifyHostname(env.certName) != nil {
		return nil, fmt.Errorf("%w: the certificate does not name %s", ErrSignature, env.certName)
	}
	if _, ok := cert.PublicKey.(*rsa.PublicKey); !ok {
		return nil, fmt.Errorf("%w: the certificate's key is not RSA", ErrSignature)
	}
	return cert, nil
}

// payPalClient fetches certificates: TLS verified against the system's
// roots, no redirects (a redirect could leave PayPal's hosts).
var payPalClient = &http.Client{
	Timeout: 10 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error {
		return errors.New("redirect refused: the certificate must come from PayPal's host itself")
	},
}

// fetchOverHTTPS GETs url. A PayPal that does not answer, or answers 5xx,
// is ErrUnavailable (PayPal retries the delivery); a 4xx is ErrSignature:
// no such certificate.
func fetchOverHTTPS(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSignature, err)
	}
	resp, err := payPalClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: fetching PayPal's certificate: %v", ErrUnavailable, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 500:
		return nil, fmt.Errorf("%w: PayPal answered %d for its certificate", ErrUnavailable, resp.StatusCode)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%w: PayPal answered %d for the certificate URL", ErrSignature, resp.StatusCode)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("%w: reading PayPal's certificate: %v", ErrUnavailable, err)
	}
	return raw, nil
}

// payPalDisputeOutcomes reads a resolved dispute's outcome_code, by
// PayPal's Disputes API reference: the buyer's favour, the seller's
// acceptance of the claim (ACCEPTED: the buyer is refunded) and a payout to
// the buyer (RESOLVED_WITH_PAYOUT) lose the funds; the seller's favour, a
// claim denied, and a claim the buyer cancelled keep them. NONE and codes
// not listed are neither, and take nothing back.
var payPalDisputeOutcomes = map[string]DisputeStage{
	"RESOLVED_BUYER_FAVOUR":  DisputeLost,
	"ACCEPTED":               DisputeLost,
	"RESOLVED_WITH_PAYOUT":   DisputeLost,
	"RESOLVED_SELLER_FAVOUR": DisputeWon,
	"DENIED":                 DisputeWon,
	"CANCELED_BY_BUYER":      DisputeWon,
}

// payPalReversal reads a refund or dispute, by PayPal's event names: a
// capture refunded (the refund names its capture by its "up" link; whether
// it is the whole capture it does not say), or reversed by PayPal (the
// funds taken back: lost); a subscription's sale refunded or reversed, the
// same way, naming its sale (sale_id); a dispute opened, or resolved (in the buyer's
// favour: lost; otherwise: won), naming the capture it disputes.
func payPalReversal(eventType string, resource map[string]any) (*Reversal, string) {
	var r *Reversal
	var capture string
	switch eventType {
	case "PAYMENT.CAPTURE.REFUNDED", "PAYMENT.CAPTURE.REVERSED":
		r = &Reversal{Kind: Refund}
		if eventType == "PAYMENT.CAPTURE.REVERSED" {
			r = &Reversal{Kind: Dispute, Stage: DisputeLost}
		}
		if r.Kind == Refund {
			// The refund's own amount, or, where PayPal states it, everything
			// refunded of the capture so far.
			amount, _ := resource["amount"].(map[string]any)
			r.RefundID, _ = resource["id"].(string)
			r.Amount = decimalMoney(amount["value"], amount["currency_code"])
			breakdown, _ := resource["seller_payable_breakdown"].(map[string]any)
			if total, _ := breakdown["total_refunded_amount"].(map[string]any); total != nil {
				r.Amount, r.Cumulative = decimalMoney(total["value"], total["currency_code"]), true
			}
		}
		links, _ := resource["links"].([]any)
		for _, l := range links {
			link, _ := l.(map[string]any)
			if href, _ := link["href"].(string); link["rel"] == "up" {
				if _, id, ok := strings.Cut(href, "/v2/payments/captures/"); ok && !strings.Contains(id, "/") {
					capture = id
				}
			}
		}
	case "PAYMENT.SALE.REFUNDED", "PAYMENT.SALE.REVERSED":
		// A subscription's sale: the refund names it by sale_id.
		r = &Reversal{Kind: Dispute, Stage: DisputeLost}
		if eventType == "PAYMENT.SALE.REFUNDED" {
			amount, _ := resource["amount"].(map[string]any)
			r = &Reversal{Kind: Refund, Amount: decimalMoney(amount["total"], amount["currency"])}
			r.RefundID, _ = resource["id"].(string)
		}
		capture, _ = resource["sale_id"].(string)
	case "CUSTOMER.DISPUTE.CREATED", "CUSTOMER.DISPUTE.RESOLVED":
		r = &Reversal{Kind: Dispute, Stage: DisputeOpened}
		if eventType == "CUSTOMER.DISPUTE.RESOLVED" {
			outcome, _ := resource["dispute_outcome"].(map[string]any)
			code, _ := outcome["outcome_code"].(string)
			stage, known := payPalDisputeOutcomes[code]
			if !known {
				return nil, "dispute resolved with outcome " + strconv.Quote(truncate(code, 40)) + ", which Guardian does not know: neither won nor lost"
			}
			r.Stage = stage
		}
		txns, _ := resource["disputed_transactions"].([]any)
		if len(txns) > 0 {
			txn, _ := txns[0].(map[string]any)
			capture, _ = txn["seller_transaction_id"].(string)
		}
	default:
		return nil, ""
	}
	if capture == "" || len(capture) > maxIDLength || hasNUL(capture) {
		return nil, "names no capture: a reversal Guardian cannot match to a payment"
	}
	r.PaymentID = capture
	return r, ""
}

// PayPal's API, live and sandbox.
const (
	PayPalAPIURL        = "https://api-m.paypal.com"
	PayPalSandboxAPIURL = "https://api-m.sandbox.paypal.com"
)

// PayPal's settings, and its registration: served when its webhook ids
// are set; confirmed with PayPal's API, and backfilled, when its REST
// app's credentials are.
var (
	payPalWebhookIDs = settings.List(settings.Setting{
		Name: "GUARDIAN_PAYPAL_WEBHOOK_IDS", Default: "unset (PayPal not served)",
		Doc: "PayPal webhook ids whose deliveries verify, comma-separated",
	}, ",")
	payPalClientID = settings.String(settings.Setting{
		Name: "GUARDIAN_PAYPAL_CLIENT_ID", Default: "unset (no confirmation, backfill off; a warning at start)",
		Doc: "a PayPal REST app's client id: every PayPal delivery that pays, refunds, disputes, or states a subscription's standing or payment is confirmed with PayPal's API and stored as PayPal shows it (PayPal's signature binds the body only by a CRC32), and the PayPal backfill and `guardian backfill paypal` are on",
	}, "")
	payPalClientSecret = settings.String(settings.Setting{
		Name: "GUARDIAN_PAYPAL_CLIENT_SECRET", Default: "unset", Secret: true,
		Doc: "the REST app's secret, with `GUARDIAN_PAYPAL_CLIENT_ID`",
	}, "")
	payPalFulfilRenewals = settings.Bool(settings.Setting{
		Name: "GUARDIAN_PAYPAL_FULFIL_RENEWALS", Default: "`false`",
		Doc: "whether each completed sale of a PayPal subscription fulfils too, as a renewal (PayPal's sale does not say which cycle it pays: the first cycle's is a renewal too)",
	}, false)
	payPalAPIURL = settings.String(settings.Setting{
		Name: "GUARDIAN_PAYPAL_API_URL", Default: "`https://api-m.paypal.com` (`https://api-m.sandbox.paypal.com` in test mode)",
		Doc: "PayPal's API, for the confirmation and the backfill",
	}, "")
)

func init() {
	Register(Driver{Name: "paypal", Open: openPayPal})
}

// openPayPal reads PayPal's settings.
func openPayPal(env *settings.Env, c Common) (Provider, error) {
	ids := payPalWebhookIDs.Read(env)
	id, secret := payPalClientID.Read(env), payPalClientSecret.Read(env)
	apiURL := APIURL(env, c, payPalAPIURL, PayPalAPIURL, PayPalSandboxAPIURL)
	switch {
	case len(ids) == 0 && id == "" && secret == "":
		return nil, nil
	case (id == "") != (secret == ""):
		return nil, errors.New("GUARDIAN_PAYPAL_CLIENT_ID and GUARDIAN_PAYPAL_CLIENT_SECRET go together: the confirmation of deliveries and the backfill need both")
	case len(ids) == 0:
		return nil, errors.New("GUARDIAN_PAYPAL_CLIENT_ID needs GUARDIAN_PAYPAL_WEBHOOK_IDS: the backfill feeds the PayPal provider's rules")
	case c.Mode == ModeLive && strings.Contains(apiURL, "sandbox"):
		return nil, errors.New("GUARDIAN_PAYPAL_API_URL is the sandbox's in a live deployment (set GUARDIAN_MODE=test for a test deployment)")
	case c.Mode == ModeTest && apiURL == PayPalAPIURL:
		return nil, errors.New("GUARDIAN_PAYPAL_API_URL is live in a test deployment (GUARDIAN_MODE=test)")
	}
	cfg := PayPalConfig{WebhookIDs: ids, Tolerance: c.Tolerance, Mode: c.Mode, FulfilRenewals: payPalFulfilRenewals.Read(env)}
	if id == "" {
		env.Warn("PayPal: no GUARDIAN_PAYPAL_CLIENT_ID, so deliveries are not confirmed with PayPal's API. PayPal's signature binds the body " +
			"only by a CRC32, which anyone can match: Guardian trusts each delivered body as signed, bound to its transmission id, so whoever " +
			"holds a delivery less than the timestamp tolerance (" + c.Tolerance.String() + ") old before Guardian sees it can put a body of their choice under its signature. " +
			"Set GUARDIAN_PAYPAL_CLIENT_ID and GUARDIAN_PAYPAL_CLIENT_SECRET (docs/security.md)")
		return NewPayPal(cfg)
	}
	api, err := NewPayPalAPI(id, secret, apiURL)
	if err != nil {
		return nil, err
	}
	cfg.API = api
	return NewPayPal(cfg)
}
