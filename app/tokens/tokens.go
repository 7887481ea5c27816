// Package tokens issues single-use tokens: a claim link, a one-time
// confirmation. A token is 256 bits of randomness bound to a purpose and a
// payload, valid until its expiry, and redeemable exactly once. Only its
// SHA-256 is stored.
package tokens

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/guardian-pay/guardian/db"
)

// ErrGone means a token cannot be redeemed: unknown, already redeemed or
// expired. The three are one error on purpose: a caller learns nothing about
// tokens it does not hold.
var ErrGone = errors.New("token is not redeemable")

// ErrInvalid wraps a refused issue request.
var ErrInvalid = errors.New("invalid token request")

// Record is what a token is bound to.
type Record = db.TokenRecord

// Store keeps token records by hash.
//
// Take must be atomic: of any number of concurrent Takes of one hash,
// exactly one returns the record, and once taken a record never comes back,
// also after the store restarts. Take returns ErrGone when there is nothing
// to take. Both methods must be safe for concurrent use.
type Store interface {
	Put(ctx context.Context, hash []byte, r Record) error
	Take(ctx context.Context, hash []byte) (Record, error)
}

// Service issues and redeems tokens over a Store.
type Service struct {
	store Store
	now   func() time.Time
	// domain separates Internal's tokens from public ones; empty for public.
	domain string
}

// internalDomain is mixed into the hash of Guardian's own tokens.
const internalDomain = "guardian internal token v1"

// Internal returns the Service for Guardian's own tokens (the dashboard's
// confirmations). They are stored under a different hash of the same
// value, so the public redeem endpoint never finds, and so never consumes,
// one of them; nor can a public token be redeemed as an internal one.
func (s *Service) Internal() *Service {
	c := *s
	c.domain = internalDomain
	return &c
}

func (s *Service) hash(token string) []byte {
	if s.domain == "" {
		return Hash(token)
	}
	h := sha256.New()
	h.Write([]byte(s.domain))
	h.Write([]byte{0})
	h.Write([]byte(token))
	return h.Sum(nil)
}

// MaxTTL bounds a token's life. A single-use token that lives for months is
// a password.
const MaxTTL = 30 * 24 * time.Hour

// New returns a Service. now defaults to time.Now.
func New(store Store, now func() time.Time) *Service {
	if now == nil {
		now = time.Now
	}
	return &Service{store: store, now: now}
}

// Issue makes a token for purpose bound to payload (JSON; nil means null),
// valid for ttl, and returns its value: show it once, it is not stored.
func (s *Service) Issue(ctx context.Context, purpose string, payload json.RawMessage, ttl time.Duration) (string, Record, error) {
	switch {
	case strings.TrimSpace(purpose) == "" || len(purpose) > 100:
		return "", Record{}, fmt.Errorf("%w: purpose is required (at most 100 characters)", ErrInvalid)
	case ttl <= 0 || ttl > MaxTTL:
		return "", Record{}, fmt.Errorf("%w: ttl must be between 1s and %s", ErrInvalid, MaxTTL)
	case len(payload) > 16<<10:
		return "", Record{}, fmt.Errorf("%w: payload is at most 16 KiB", ErrInvalid)
	}
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	if !json.Valid(payload) {
		return "", Record{}, fmt.Errorf("%w: payload must be JSON", ErrInvalid)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", Record{}, fmt.Errorf("token randomness: %w", err)
	}
	token := base64.RawURLEncoding.EncodeToString(raw)
	rec := Record{Purpose: purpose, Payload: payload, ExpiresAt: s.now().Add(ttl).Truncate(time.Microsecond)}
	if err := s.store.Put(ctx, s.hash(token), rec); err != nil {
		return "", Record{}, fmt.Errorf("store token: %w", err)
	}
	return token, rec, nil
}

// Redeem consumes token and returns what it was bound to, or ErrGone.
func (s *Service) Redeem(ctx context.Context, token string) (Record, error) {
	if token == "" || len(token) > 100 {
		return Record{}, ErrGone
	}
	rec, err := s.store.Take(ctx, s.hash(token))
	if err != nil {
		return Record{}, err
	}
	if !s.now().Before(rec.ExpiresAt) {
		return Record{}, ErrGone
	}
	return rec, nil
}

// RedeemFor consumes token and returns its payload if it was issued for
// purpose. A token presented for another purpose is consumed all the same
// and refused with ErrGone: it fails closed.
func (s *Service) RedeemFor(ctx context.Context, token, purpose string) (json.RawMessage, error) {
	rec, err := s.Redeem(ctx, token)
	if err != nil {
		return nil, err
	}
	if rec.Purpose != purpose {
		return nil, ErrGone
	}
	return rec.Payload, nil
}

// Hash is how a public token is stored: its SHA-256.
func Hash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}
