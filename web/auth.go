package web

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

// tokenSet holds the admin tokens as SHA-256 digests, so every comparison
// takes the same time whatever the lengths, and the tokens themselves are
// not kept in memory longer than start-up.
type tokenSet [][sha256.Size]byte

func newTokenSet(tokens []string) tokenSet {
	var set tokenSet
	for _, t := range tokens {
		if t = strings.TrimSpace(t); t != "" {
			set = append(set, sha256.Sum256([]byte(t)))
		}
	}
	return set
}

// valid reports whether token is one of the set, comparing against every
// entry in constant time.
func (s tokenSet) valid(token string) bool {
	if token == "" {
		return false
	}
	given := sha256.Sum256([]byte(token))
	match := 0
	for _, want := range s {
		match |= subtle.ConstantTimeCompare(given[:], want[:])
	}
	return match == 1
}

// bearerToken returns the token of an "Authorization: Bearer <token>" header.
func bearerToken(r *http.Request) string {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// requireOperator admits requests carrying a valid admin token, as a bearer
// token or (for the dashboard) through a valid session.
func (s *Server) requireOperator(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.tokens.valid(bearerToken(c.Request())) {
			return next(c)
		}
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="guardian"`)
		return &HTTPError{Code: http.StatusUnauthorized, Msg: "operator token required"}
	}
}

// requireOperatorOrSession admits a bearer token or a dashboard session, so
// the dashboard's link to River UI works in a browser. The session cookie is
// SameSite=Strict, and a state-changing request must come from this origin.
func (s *Server) requireOperatorOrSession(next echo.HandlerFunc) echo.HandlerFunc {
	bearer := s.requireOperator(next)
	return func(c echo.Context) error {
		if _, ok := s.currentSession(c); ok {
			r := c.Request()
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				if origin := r.Header.Get("Origin"); origin != "" && !sameOrigin(origin, r) {
					return &HTTPError{Code: http.StatusForbidden, Msg: "cross-origin request refused"}
				}
			}
			return next(c)
		}
		return bearer(c)
	}
}

func sameOrigin(origin string, r *http.Request) bool {
	host := strings.TrimPrefix(strings.TrimPrefix(origin, "https://"), "http://")
	return host == r.Host
}
