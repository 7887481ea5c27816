package receiver

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/guardian-pay/guardian/receiver/contract"
)

// Delivery is one request from Guardian, as the handler sees it: the body
// every attempt under the key carries (the key, the payment, the event, the
// action, "" to fulfil or contract.ActionRevoke to take the payment back,
// and the provider's payload byte for byte as it signed it), and the
// attempt.
type Delivery struct {
	contract.Body
	// Attempt is Guardian's attempt number for the key (1 first); the
	// body is the same for every attempt.
	Attempt int
}

// PurchaseOf reads the purchase a delivery carries (contract.Purchase),
// and false when it carries none: a Guardian without an actions file
// sends none, and a test delivery none. Which of the purchase's actions
// the delivery performs is d.ActionName.
func (d Delivery) PurchaseOf() (contract.Purchase, bool) {
	var p contract.Purchase
	if len(d.Purchase) == 0 || json.Unmarshal(d.Purchase, &p) != nil {
		return contract.Purchase{}, false
	}
	return p, true
}

// Handler performs the action for one delivery inside tx, the transaction
// that records its key: a write through tx happens exactly once. It
// returns nil when the action is done, Decline(reason) to decline the key
// for good (its writes are rolled back), or any other error to fail
// without recording anything (its writes are rolled back, and Guardian's
// next attempt with the key runs it again). An action outside the database
// (an API call) is not covered by tx: give it the key as its own
// idempotency key.
type Handler func(ctx context.Context, tx pgx.Tx, d Delivery) error

// DeclineError is a handler's decision to decline a key.
type DeclineError struct {
	Reason string
}

func (e *DeclineError) Error() string { return "declined: " + e.Reason }

// Decline returns the error a Handler gives to decline its key for good:
// nothing was done, and nothing will be for this key.
func Decline(reason string) error { return &DeclineError{Reason: reason} }

// Config configures a Receiver.
type Config struct {
	// Pool is the merchant's database, holding the table in Schema.
	// Required.
	Pool *pgxpool.Pool
	// Secrets are the connector secrets ("whsec_..."): requests signed with
	// any of them are accepted (more than one while a secret is rotated),
	// and answers are signed with the first. Required.
	Secrets []string
	// Handler performs the action. Required.
	Handler Handler
	// Logger receives one line per refused or failed request. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// Now is the clock requests' timestamps are checked against (within
	// contract.Tolerance either way) and answers are signed at. Defaults
	// to time.Now.
	Now func() time.Time
	// MaxBody caps a request's body. Defaults to
	// contract.MaxRequestBytes(contract.DefaultMaxPayloadBytes): every
	// request Guardian sends for a payload its intake took under the default
	// cap (1 MiB and the envelope). A deployment that raises
	// GUARDIAN_MAX_BODY_BYTES sets MaxBody to
	// contract.MaxRequestBytes of that.
	MaxBody int64
}

// Receiver serves Guardian's action and lookup requests.
type Receiver struct {
	cfg     Config
	signers []*standardwebhooks.Webhook
}

// New returns a Receiver, or an error if the configuration is unusable.
func New(cfg Config) (*Receiver, error) {
	if cfg.Pool == nil || cfg.Handler == nil {
		return nil, errors.New("receiver: Pool and Handler are required")
	}
	if len(cfg.Secrets) == 0 {
		return nil, errors.New("receiver: at least one connector secret is required")
	}
	r := &Receiver{cfg: cfg}
	for i, s := range cfg.Secrets {
		key, err := contract.DecodeSecret(s)
		if err != nil {
			return nil, fmt.Errorf("receiver: secret %d is %w", i+1, err)
		}
		w, err := standardwebhooks.NewWebhookRaw(key)
		if err != nil {
			return nil, fmt.Errorf("receiver: secret %d: %w", i+1, err)
		}
		r.signers = append(r.signers, w)
	}
	if r.cfg.Logger == nil {
		r.cfg.Logger = slog.Default()
	}
	if r.cfg.Now == nil {
		r.cfg.Now = time.Now
	}
	if r.cfg.MaxBody == 0 {
		r.cfg.MaxBody = contract.MaxRequestBytes(contract.DefaultMaxPayloadBytes)
	}
	return r, nil
}

// verify reports whether body and header carry a fresh signature by one of
// the secrets: fresh by the receiver's own clock (Config.Now).
func (r *Receiver) verify(body []byte, header http.Header) bool {
	if !contract.Fresh(header, r.cfg.Now()) {
		return false
	}
	for _, w := range r.signers {
		if w.VerifyIgnoringTimestamp(body, header) == nil {
			return true
		}
	}
	return false
}

// stored is a finished key's row.
type stored struct {
	hash   []byte
	status string
	answer contract.Statement
}

// Action returns the handler for Guardian's POSTs.
func (r *Receiver) Action() http.Handler {
	return http.HandlerFunc(r.serveAction)
}

func (r *Receiver) serveAction(w http.ResponseWriter, req *http.Request) {
	ctx := req.Context()
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, r.cfg.MaxBody))
	if err != nil {
		http.Error(w, "body too large or unreadable", http.StatusRequestEntityTooLarge)
		return
	}
	d, test, code, why := r.read(body, req.Header)
	if code != 0 {
		if code == http.StatusUnauthorized {
			r.cfg.Logger.WarnContext(ctx, "receiver: refused a request: "+why)
		}
		http.Error(w, why, code)
		return
	}
	sum := sha256.Sum256(body)

	// A finished key answers from its row, without waiting for anything.
	if row, ok, err := r.find(ctx, r.cfg.Pool, d.IdempotencyKey); err != nil {
		r.fail(w, ctx, "read key", err)
		return
	} else if ok {
		r.replay(w, row, sum[:])
		return
	}
	r.act(w, ctx, d, sum[:], test)
}

// read checks an action request before anything is looked up: a fresh
// signature by one of the secrets, a body that is exactly a
// contract.Body whose key is the Idempotency-Key header's, and a test
// delivery under a test key and only then. It returns the delivery and
// whether it is a test, or the status to refuse it with and why.
func (r *Receiver) read(body []byte, header http.Header) (d Delivery, test bool, code int, why string) {
	if !r.verify(body, header) {
		return Delivery{}, false, http.StatusUnauthorized, "signature or timestamp not valid"
	}
	var b contract.Body
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil || b.IdempotencyKey == "" || b.IdempotencyKey != header.Get("Idempotency-Key") {
		return Delivery{}, false, http.StatusBadRequest, "not a Guardian request: body and Idempotency-Key disagree"
	}
	test = b.EventType == contract.TestEventType
	if test != strings.HasPrefix(b.IdempotencyKey, contract.TestKeyPrefix) {
		return Delivery{}, false, http.StatusBadRequest, "test deliveries use test keys, and only they do"
	}
	d = Delivery{Body: b}
	fmt.Sscan(header.Get(contract.HeaderAttempt), &d.Attempt)
	return d, test, 0, ""
}

// act runs the handler for a key with no row yet, holding the key's lock
// for the transaction.
func (r *Receiver) act(w http.ResponseWriter, ctx context.Context, d Delivery, sum []byte, test bool) {
	tx, err := r.cfg.Pool.Begin(ctx)
	if err != nil {
		r.fail(w, ctx, "begin", err)
		return
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	locked, err := tryLock(ctx, tx, d.IdempotencyKey)
	if err != nil {
		r.fail(w, ctx, "lock key", err)
		return
	}
	if !locked {
		r.state(w, http.StatusConflict, contract.Statement{IdempotencyKey: d.IdempotencyKey, Status: contract.StatusInProgress})
		return
	}
	// The key may have finished between the first read and the lock.
	if row, ok, err := r.find(ctx, tx, d.IdempotencyKey); err != nil {
		r.fail(w, ctx, "read key", err)
		return
	} else if ok {
		r.replay(w, row, sum)
		return
	}

	herr := r.perform(ctx, tx, d, test)
	var decline *DeclineError
	var st contract.Statement
	code := http.StatusOK
	switch {
	case errors.As(herr, &decline):
		st = contract.Statement{IdempotencyKey: d.IdempotencyKey, Status: contract.StatusDeclined, Reason: decline.Reason}
		code = http.StatusUnprocessableEntity
	case herr != nil:
		r.fail(w, ctx, "handler", herr)
		return
	default:
		st = contract.Statement{IdempotencyKey: d.IdempotencyKey, Status: contract.StatusDone, Receipt: newReceipt()}
	}
	answer, _ := json.Marshal(st)
	// The answer goes as text: bytes are bytea to pgx's exec mode (a
	// transaction pooler's), which jsonb will not read.
	if _, err := tx.Exec(ctx, `INSERT INTO guardian_receiver_key (idempotency_key, body_sha256, status, answer, test) VALUES ($1, $2, $3, $4, $5)`,
		d.IdempotencyKey, sum, st.Status, string(answer), test); err != nil {
		r.fail(w, ctx, "record key", err)
		return
	}
	if err := tx.Commit(ctx); err != nil {
		// Whether the commit landed is unknown here; Guardian's lookup
		// reads the truth from the table.
		r.fail(w, ctx, "commit", err)
		return
	}
	r.state(w, code, st)
}

// perform runs the merchant's handler in a savepoint, so a decline rolls
// back its writes and keeps the transaction for the key's row; a test
// delivery runs the test action instead.
func (r *Receiver) perform(ctx context.Context, tx pgx.Tx, d Delivery, test bool) error {
	if test {
		return testAction(ctx, d.Payload)
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	herr := r.cfg.Handler(ctx, sp, d)
	var decline *DeclineError
	if herr == nil {
		return sp.Commit(ctx)
	}
	if errors.As(herr, &decline) {
		if err := sp.Rollback(ctx); err != nil {
			return err
		}
	}
	return herr
}

// testAction is what a test delivery does: nothing, after an optional
// hold (so a conformance run can see the key in progress), or a decline.
func testAction(ctx context.Context, payload json.RawMessage) error {
	var p contract.TestPayload
	_ = json.Unmarshal(payload, &p)
	if hold := time.Duration(min(p.HoldMillis, 10_000)) * time.Millisecond; hold > 0 {
		select {
		case <-time.After(hold):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if p.Decline {
		return Decline("conformance test: declined as asked")
	}
	return nil
}

// replay answers a finished key: its stored answer for the same body, a
// mismatch for another.
func (r *Receiver) replay(w http.ResponseWriter, row stored, sum []byte) {
	if !bytes.Equal(row.hash, sum) {
		r.state(w, http.StatusUnprocessableEntity, contract.Statement{IdempotencyKey: row.answer.IdempotencyKey, Status: contract.StatusMismatch})
		return
	}
	code := http.StatusOK
	if row.status == contract.StatusDeclined {
		code = http.StatusUnprocessableEntity
	}
	r.state(w, code, row.answer)
}

// Lookup returns the handler for Guardian's lookups: GET with the key as
// the last path segment (mount it at ".../{key}").
func (r *Receiver) Lookup() http.Handler {
	return http.HandlerFunc(r.serveLookup)
}

func (r *Receiver) serveLookup(w http.ResponseWriter, req *http.Request) {
	ctx := req.Context()
	if !r.verify(nil, req.Header) {
		http.Error(w, "signature or timestamp not valid", http.StatusUnauthorized)
		return
	}
	key := req.URL.Path[strings.LastIndexByte(req.URL.Path, '/')+1:]
	if key == "" || key != req.Header.Get("Idempotency-Key") {
		http.Error(w, "the path's key and the Idempotency-Key disagree", http.StatusBadRequest)
		return
	}
	row, ok, err := r.find(ctx, r.cfg.Pool, key)
	if err != nil {
		r.fail(w, ctx, "read key", err)
		return
	}
	if ok {
		r.state(w, http.StatusOK, contract.Statement{IdempotencyKey: key, Status: row.status, Reason: row.answer.Reason, Receipt: row.answer.Receipt})
		return
	}
	// No row: either nothing happened, or the key's transaction is open.
	tx, err := r.cfg.Pool.Begin(ctx)
	if err != nil {
		r.fail(w, ctx, "begin", err)
		return
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	locked, err := tryLock(ctx, tx, key)
	if err != nil {
		r.fail(w, ctx, "lock key", err)
		return
	}
	if !locked {
		r.state(w, http.StatusOK, contract.Statement{IdempotencyKey: key, Status: contract.StatusInProgress})
		return
	}
	row, ok, err = r.find(ctx, tx, key)
	switch {
	case err != nil:
		r.fail(w, ctx, "read key", err)
	case ok:
		r.state(w, http.StatusOK, contract.Statement{IdempotencyKey: key, Status: row.status, Reason: row.answer.Reason, Receipt: row.answer.Receipt})
	default:
		r.state(w, http.StatusOK, contract.Statement{IdempotencyKey: key, Status: contract.StatusNotDone})
	}
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// find reads a finished key's row.
func (r *Receiver) find(ctx context.Context, q querier, key string) (stored, bool, error) {
	var row stored
	var answer []byte
	err := q.QueryRow(ctx, `SELECT body_sha256, status, answer FROM guardian_receiver_key WHERE idempotency_key = $1`, key).Scan(&row.hash, &row.status, &answer)
	if errors.Is(err, pgx.ErrNoRows) {
		return stored{}, false, nil
	}
	if err != nil {
		return stored{}, false, err
	}
	if err := json.Unmarshal(answer, &row.answer); err != nil {
		return stored{}, false, fmt.Errorf("stored answer: %w", err)
	}
	return row, true, nil
}

// tryLock takes the key's transaction-scoped advisory lock, without
// waiting: false means another transaction holds it (the key is in
// progress). A hash collision between two keys only makes one answer "in
// progress" for a moment, never acts twice.
func tryLock(ctx context.Context, tx pgx.Tx, key string) (bool, error) {
	var ok bool
	err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(hashtextextended('guardian-receiver:' || $1, 0))`, key).Scan(&ok)
	return ok, err
}

// state writes a signed statement with code.
func (r *Receiver) state(w http.ResponseWriter, code int, st contract.Statement) {
	_ = contract.WriteStatement(w, r.cfg.Secrets[0], code, st, r.cfg.Now())
}

// fail answers 500: nothing was recorded (or, after a failed commit,
// nothing is known; the lookup reads the table).
func (r *Receiver) fail(w http.ResponseWriter, ctx context.Context, what string, err error) {
	r.cfg.Logger.ErrorContext(ctx, "receiver: "+what+" failed", "error", err)
	http.Error(w, "internal error", http.StatusInternalServerError)
}

func newReceipt() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "rcpt_" + hex.EncodeToString(b[:])
}
