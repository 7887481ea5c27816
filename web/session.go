package web

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

// Dashboard sessions are stateless: a cookie holding the operator's name and
// an expiry, signed with a key derived from the admin token used to sign in.
// Rotating that token out ends its sessions. Signing out clears the cookie;
// a copied cookie stays valid until it expires, so sessions are short
// (SessionTTL).

const (
	sessionCookie    = "guardian_session"
	loginCSRFCookie  = "guardian_login_csrf"
	sessionKeyPrefix = "guardian dashboard session v1"
)

// session is a signed-in operator.
type session struct {
	Operator string `json:"op"`
	Expires  int64  `json:"exp"`
	// raw is the cookie value, the seed of the session's CSRF token.
	raw string
}

// sessionKeys derives one signing key per admin token.
func sessionKeys(tokens []string) [][]byte {
	var keys [][]byte
	for _, t := range tokens {
		if t = strings.TrimSpace(t); t != "" {
			m := hmac.New(sha256.New, []byte(t))
			m.Write([]byte(sessionKeyPrefix))
			keys = append(keys, m.Sum(nil))
		}
	}
	return keys
}

// keyFor returns the session key of a valid admin token.
func (s *Server) keyFor(token string) []byte {
	for _, t := range s.cfg.AdminTokens {
		if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(t)), []byte(token)) == 1 {
			return sessionKeys([]string{t})[0]
		}
	}
	return nil
}

func mac(key []byte, parts ...string) string {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (s *Server) newSessionCookie(c echo.Context, key []byte, operator string) *http.Cookie {
	body, _ := json.Marshal(session{Operator: operator, Expires: s.now().Add(s.cfg.SessionTTL).Unix()})
	payload := base64.RawURLEncoding.EncodeToString(body)
	return &http.Cookie{
		Name: sessionCookie, Value: payload + "." + mac(key, payload), Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.IsTLS(),
		MaxAge: int(s.cfg.SessionTTL.Seconds()),
	}
}

// currentSession returns the request's valid session, if any.
func (s *Server) currentSession(c echo.Context) (session, bool) {
	ck, err := c.Cookie(sessionCookie)
	if err != nil {
		return session{}, false
	}
	payload, sig, ok := strings.Cut(ck.Value, ".")
	if !ok {
		return session{}, false
	}
	valid := 0
	for _, key := range s.sessionKeys {
		valid |= subtle.ConstantTimeCompare([]byte(mac(key, payload)), []byte(sig))
	}
	if valid != 1 {
		return session{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return session{}, false
	}
	var sess session
	if json.Unmarshal(raw, &sess) != nil || sess.Operator == "" || s.now().Unix() >= sess.Expires {
		return session{}, false
	}
	sess.raw = ck.Value
	return sess, true
}

// csrfToken is the session's form token: forms carry it, POSTs check it.
func (s *Server) csrfToken(sess session) string {
	return mac(s.sessionKeys[0], "csrf", sess.raw)
}

func (s *Server) checkCSRF(c echo.Context, sess session) error {
	given := c.FormValue("_csrf")
	for _, key := range s.sessionKeys {
		if subtle.ConstantTimeCompare([]byte(mac(key, "csrf", sess.raw)), []byte(given)) == 1 {
			return nil
		}
	}
	return &HTTPError{Code: http.StatusForbidden, Msg: "form expired or forged: reload the page and try again"}
}

// loginCSRF sets (or reuses) the login form's double-submit cookie.
func loginCSRF(c echo.Context) string {
	if ck, err := c.Cookie(loginCSRFCookie); err == nil && len(ck.Value) >= 22 {
		return ck.Value
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	v := base64.RawURLEncoding.EncodeToString(b)
	c.SetCookie(&http.Cookie{Name: loginCSRFCookie, Value: v, Path: "/login", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.IsTLS()})
	return v
}

func checkLoginCSRF(c echo.Context) error {
	ck, err := c.Cookie(loginCSRFCookie)
	if err != nil || ck.Value == "" || subtle.ConstantTimeCompare([]byte(ck.Value), []byte(c.FormValue("_csrf"))) != 1 {
		return errors.New("login form expired: reload the page")
	}
	return nil
}

// requireSession guards dashboard pages: without a session, a GET is sent to
// the sign-in page and anything else is refused.
func (s *Server) requireSession(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		sess, ok := s.currentSession(c)
		if !ok {
			if c.Request().Method == http.MethodGet {
				return c.Redirect(http.StatusSeeOther, "/login")
			}
			return &HTTPError{Code: http.StatusUnauthorized, Msg: "sign in first"}
		}
		if c.Request().Method == http.MethodPost {
			if err := s.checkCSRF(c, sess); err != nil {
				return err
			}
		}
		c.Set("session", sess)
		c.Response().Header().Set("Cache-Control", "no-store")
		return next(c)
	}
}
