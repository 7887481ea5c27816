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
	"time"

	"github.com/labstack/echo/v4"

	"github.com/guardian-pay/guardian/app/operators"
)

// Dashboard sessions are a cookie naming the operator's credential, when
// the session began and when it expires, signed with the database's session
// key. Every request checks the credential again, so revoking it (or
// `guardian operators signout`) ends its sessions at their next request,
// and rotating an environment token out ends the sessions it began.

const (
	sessionCookie   = "guardian_session"
	loginCSRFCookie = "guardian_login_csrf"
	// securePrefix marks cookies that only a secure origin may set, for
	// the whole host, never a subdomain (RFC 6265bis).
	securePrefix = "__Host-"
)

// session is a signed-in operator.
type session struct {
	Operator   string `json:"op"`
	Credential string `json:"cred"`
	Begun      int64  `json:"iat"` // Unix milliseconds
	Expires    int64  `json:"exp"` // Unix seconds
	// raw is the cookie value, the seed of the session's CSRF token.
	raw string
}

// errNoSession means the request carries no valid session.
var errNoSession = errors.New("no session")

func mac(key []byte, parts ...string) string {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// cookieName is name as this server sets it: with the __Host- prefix when
// operators reach it over https.
func (s *Server) cookieName(name string) string {
	if s.secure {
		return securePrefix + name
	}
	return name
}

func (s *Server) cookie(name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: s.cookieName(name), Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.secure,
	}
}

func (s *Server) newSessionCookie(p operators.Principal) *http.Cookie {
	now := s.now()
	body, _ := json.Marshal(session{Operator: p.Name, Credential: p.Credential, Begun: now.UnixMilli(), Expires: now.Add(s.cfg.SessionTTL).Unix()})
	payload := base64.RawURLEncoding.EncodeToString(body)
	return s.cookie(sessionCookie, payload+"."+mac(s.cfg.SessionKey, "session", payload), int(s.cfg.SessionTTL.Seconds()))
}

// currentSession returns the request's session, errNoSession when it has
// no valid one, or the error that kept it from checking.
func (s *Server) currentSession(c echo.Context) (session, error) {
	ck, err := c.Cookie(s.cookieName(sessionCookie))
	if err != nil {
		return session{}, errNoSession
	}
	payload, sig, ok := strings.Cut(ck.Value, ".")
	if !ok || subtle.ConstantTimeCompare([]byte(mac(s.cfg.SessionKey, "session", payload)), []byte(sig)) != 1 {
		return session{}, errNoSession
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return session{}, errNoSession
	}
	var sess session
	if json.Unmarshal(raw, &sess) != nil || sess.Credential == "" || s.now().Unix() >= sess.Expires {
		return session{}, errNoSession
	}
	p, err := s.cfg.Operators.Check(c.Request().Context(), sess.Credential, time.UnixMilli(sess.Begun))
	if errors.Is(err, operators.ErrUnknown) {
		return session{}, errNoSession
	}
	if err != nil {
		return session{}, storageError(err)
	}
	sess.Operator, sess.raw = p.Name, ck.Value
	return sess, nil
}

// csrfToken is the session's form token: forms carry it, POSTs check it.
func (s *Server) csrfToken(sess session) string {
	return mac(s.cfg.SessionKey, "csrf", sess.raw)
}

func (s *Server) checkCSRF(c echo.Context, sess session) error {
	if subtle.ConstantTimeCompare([]byte(s.csrfToken(sess)), []byte(c.FormValue("_csrf"))) == 1 {
		return nil
	}
	return &HTTPError{Code: http.StatusForbidden, Msg: "form expired or forged: reload the page and try again"}
}

// loginCSRF sets (or reuses) the login form's double-submit cookie.
func (s *Server) loginCSRF(c echo.Context) string {
	if ck, err := c.Cookie(s.cookieName(loginCSRFCookie)); err == nil && len(ck.Value) >= 22 {
		return ck.Value
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	v := base64.RawURLEncoding.EncodeToString(b)
	c.SetCookie(s.cookie(loginCSRFCookie, v, 0))
	return v
}

func (s *Server) checkLoginCSRF(c echo.Context) error {
	ck, err := c.Cookie(s.cookieName(loginCSRFCookie))
	if err != nil || ck.Value == "" || subtle.ConstantTimeCompare([]byte(ck.Value), []byte(c.FormValue("_csrf"))) != 1 {
		return errors.New("login form expired: reload the page")
	}
	return nil
}

// requireSession guards dashboard pages: without a session, a GET is sent to
// the sign-in page and anything else is refused. A POST must be a form
// from this origin (readForm) carrying the session's form token.
func (s *Server) requireSession(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		sess, err := s.currentSession(c)
		if errors.Is(err, errNoSession) {
			if c.Request().Method == http.MethodGet {
				return c.Redirect(http.StatusSeeOther, "/login")
			}
			return &HTTPError{Code: http.StatusUnauthorized, Msg: "sign in first"}
		}
		if err != nil {
			return err
		}
		if c.Request().Method == http.MethodPost {
			if err := s.readForm(c); err != nil {
				return err
			}
			if err := s.checkCSRF(c, sess); err != nil {
				return err
			}
		}
		c.Set("session", sess)
		c.Set(principalKey, operators.Principal{Name: sess.Operator, Credential: sess.Credential})
		c.Response().Header().Set("Cache-Control", "no-store")
		return next(c)
	}
}

func (s *Server) handleLoginPage(c echo.Context) error {
	if _, err := s.currentSession(c); err == nil {
		return c.Redirect(http.StatusSeeOther, "/")
	}
	return s.render(c, http.StatusOK, "login", page{Title: "Sign in", CSRF: s.loginCSRF(c)})
}

// handleLogin signs an operator in with their credential: the session, and
// every decision made in it, carry the credential's operator name.
func (s *Server) handleLogin(c echo.Context) error {
	if err := s.checkLoginCSRF(c); err != nil {
		return s.render(c, http.StatusForbidden, "login", page{Title: "Sign in", CSRF: s.loginCSRF(c), Error: err.Error()})
	}
	client := limiterKey(c.RealIP())
	if err := throttled(s.signIns, client); err != nil {
		retryAfter(c, err)
		return s.render(c, http.StatusTooManyRequests, "login", page{Title: "Sign in", CSRF: s.loginCSRF(c),
			Error: "Too many failed sign-ins from your address. Wait a minute and try again."})
	}
	p, err := s.cfg.Operators.Authenticate(c.Request().Context(), strings.TrimSpace(c.FormValue("token")))
	if errors.Is(err, operators.ErrUnknown) {
		s.signIns.fail(client)
		s.cfg.Logger.Warn("dashboard sign-in refused", "client", c.RealIP())
		return s.render(c, http.StatusUnauthorized, "login", page{Title: "Sign in", CSRF: s.loginCSRF(c),
			Error: "Sign-in refused: check your operator token."})
	}
	if err != nil {
		return storageError(err)
	}
	c.SetCookie(s.newSessionCookie(p))
	s.cfg.Logger.Info("dashboard sign-in", "operator", p.Name, "credential", p.Credential)
	return c.Redirect(http.StatusSeeOther, "/")
}

func (s *Server) handleLogout(c echo.Context) error {
	sess, err := s.currentSession(c)
	if err == nil {
		if err := s.checkCSRF(c, sess); err != nil {
			return err
		}
	}
	c.SetCookie(s.cookie(sessionCookie, "", -1))
	return c.Redirect(http.StatusSeeOther, "/login")
}
