// Package operators holds who may operate Guardian: named credentials in
// Postgres (guardian operators add|list|revoke|signout), each an unguessable
// token of which only the SHA-256 is stored, and the environment's admin
// tokens for bootstrap and automation. Every decision is audited under the
// name of the credential that made it, never a name the client typed.
package operators

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/guardian-pay/guardian/db"
)

// EnvActor is the audit actor of the environment's admin tokens
// (GUARDIAN_ADMIN_TOKEN): they name no one, so their decisions say so.
const EnvActor = "admin-token"

// TokenPrefix starts every operator token, so secret scanners and people
// can tell one from other secrets.
const TokenPrefix = "gop_"

// ErrUnknown means a credential is unknown, revoked or its session ended.
// One error for all three: a caller learns nothing about credentials it
// does not hold.
var ErrUnknown = errors.New("unknown or revoked credential")

// ErrInvalidName refuses an operator name.
var ErrInvalidName = errors.New("operator name must be 1-64 letters, digits, '.', '_', '@' or '-', starting with a letter or digit")

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// Principal is who made a request.
type Principal struct {
	// Name is the audit actor: the operator's name, or EnvActor.
	Name string
	// Credential names the credential, for sessions: "db:<id>" or
	// "env:<digest prefix>". It is not a secret.
	Credential string
}

// Service authenticates operators and manages their credentials.
type Service struct {
	store *db.Store
	env   [][sha256.Size]byte
}

// New returns a Service over store, also admitting envTokens.
func New(store *db.Store, envTokens []string) *Service {
	s := &Service{store: store}
	for _, t := range envTokens {
		if t = strings.TrimSpace(t); t != "" {
			s.env = append(s.env, sha256.Sum256([]byte(t)))
		}
	}
	return s
}

// Add makes a credential for name and returns its token, to be shown once:
// only its hash is stored.
func (s *Service) Add(ctx context.Context, name string) (string, db.Credential, error) {
	if !nameRE.MatchString(name) {
		return "", db.Credential{}, ErrInvalidName
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", db.Credential{}, fmt.Errorf("token randomness: %w", err)
	}
	token := TokenPrefix + base64.RawURLEncoding.EncodeToString(raw)
	hash := sha256.Sum256([]byte(token))
	c, err := db.AddCredential(ctx, s.store.Pool(), name, hash[:])
	return token, c, err
}

// List returns every credential, revoked ones included.
func (s *Service) List(ctx context.Context) ([]db.Credential, error) {
	return db.Credentials(ctx, s.store.Pool())
}

// Revoke revokes name's credentials, or only credential id when id is not
// 0, and returns how many. Their sessions end at their next request.
func (s *Service) Revoke(ctx context.Context, name string, id int64) (int64, error) {
	return db.RevokeCredentials(ctx, s.store.Pool(), name, id)
}

// EndSessions ends name's dashboard sessions; the credentials stay valid.
func (s *Service) EndSessions(ctx context.Context, name string) (int64, error) {
	return db.EndSessions(ctx, s.store.Pool(), name)
}

// Authenticate returns who holds token, or ErrUnknown. Environment tokens
// are compared in constant time; stored ones are found by their hash.
func (s *Service) Authenticate(ctx context.Context, token string) (Principal, error) {
	if token == "" || len(token) > 200 {
		return Principal{}, ErrUnknown
	}
	digest := sha256.Sum256([]byte(token))
	if p, ok := s.envPrincipal(digest); ok {
		return p, nil
	}
	if !strings.HasPrefix(token, TokenPrefix) {
		return Principal{}, ErrUnknown
	}
	c, err := db.ActiveCredential(ctx, s.store.Pool(), digest[:])
	if errors.Is(err, db.ErrNotFound) {
		return Principal{}, ErrUnknown
	}
	if err != nil {
		return Principal{}, err
	}
	return Principal{Name: c.Operator, Credential: "db:" + strconv.FormatInt(c.ID, 10)}, nil
}

// Check returns who holds credential now, for a session begun at begun, or
// ErrUnknown if the credential was revoked, rotated out of the environment,
// or its sessions were ended after begun.
func (s *Service) Check(ctx context.Context, credential string, begun time.Time) (Principal, error) {
	kind, ref, _ := strings.Cut(credential, ":")
	switch kind {
	case "env":
		if ref, ok := s.findEnv(func(d [sha256.Size]byte) []byte { return []byte(envRef(d)) }, []byte(credential)); ok {
			return Principal{Name: EnvActor, Credential: ref}, nil
		}
		return Principal{}, ErrUnknown
	case "db":
		id, err := strconv.ParseInt(ref, 10, 64)
		if err != nil {
			return Principal{}, ErrUnknown
		}
		c, err := db.ActiveCredentialByID(ctx, s.store.Pool(), id)
		if errors.Is(err, db.ErrNotFound) || (err == nil && c.SessionsAfter != nil && begun.Before(*c.SessionsAfter)) {
			return Principal{}, ErrUnknown
		}
		if err != nil {
			return Principal{}, err
		}
		return Principal{Name: c.Operator, Credential: credential}, nil
	}
	return Principal{}, ErrUnknown
}

// SessionKey returns the key that signs dashboard sessions, shared by every
// process of the database.
func (s *Service) SessionKey(ctx context.Context) ([]byte, error) {
	return db.Secret(ctx, s.store.Pool(), "session_key")
}

func (s *Service) envPrincipal(digest [sha256.Size]byte) (Principal, bool) {
	ref, ok := s.findEnv(func(d [sha256.Size]byte) []byte { return d[:] }, digest[:])
	return Principal{Name: EnvActor, Credential: ref}, ok
}

// findEnv compares want with key of every environment token's digest, in
// constant time and without stopping at a match, and returns the matching
// token's reference.
func (s *Service) findEnv(key func([sha256.Size]byte) []byte, want []byte) (string, bool) {
	ref := ""
	for _, d := range s.env {
		if subtle.ConstantTimeCompare(key(d), want) == 1 {
			ref = envRef(d)
		}
	}
	return ref, ref != ""
}

// envRef names an environment token by a prefix of its digest: enough to
// tell rotated tokens apart, too little to help a guesser.
func envRef(d [sha256.Size]byte) string { return "env:" + hex.EncodeToString(d[:6]) }
