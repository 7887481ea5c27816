package web

import (
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/guardian-pay/guardian/app/operators"
)

// principalKey is where an authenticated request keeps its Principal.
const principalKey = "principal"

// actor is the audit actor of an authenticated request: the name of the
// credential it came with, never a name from the request's body.
func actor(c echo.Context) string {
	p, _ := c.Get(principalKey).(operators.Principal)
	return p.Name
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

// throttled answers 429 when client has spent its failed credentials.
func throttled(l *failureLimiter, client string) error {
	wait, blocked := l.blocked(client)
	if !blocked {
		return nil
	}
	return &HTTPError{Code: http.StatusTooManyRequests, Msg: "too many failed attempts from your address: wait and try again",
		Err: errRetryAfter(max(time.Second, wait.Round(time.Second)))}
}

// errRetryAfter carries a 429's wait to the error handler's Retry-After.
type errRetryAfter time.Duration

func (e errRetryAfter) Error() string { return "retry after " + time.Duration(e).String() }

// requireOperator admits requests carrying a valid operator credential as
// a bearer token. Failed tokens count against the client's address.
func (s *Server) requireOperator(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		client := limiterKey(c.RealIP())
		if err := throttled(s.signIns, client); err != nil {
			return err
		}
		token := bearerToken(c.Request())
		p, err := s.cfg.Operators.Authenticate(c.Request().Context(), token)
		if errors.Is(err, operators.ErrUnknown) {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="guardian"`)
			if token == "" {
				return &HTTPError{Code: http.StatusUnauthorized, Msg: "operator token required: send Authorization: Bearer <token>"}
			}
			s.signIns.fail(client)
			s.cfg.Logger.Warn("operator token refused", "client", c.RealIP())
			return &HTTPError{Code: http.StatusUnauthorized, Msg: "operator token refused: unknown, revoked or mistyped"}
		}
		if err != nil {
			return storageError(err)
		}
		c.Set(principalKey, p)
		return next(c)
	}
}

// requireOperatorOrSession admits a bearer token or a dashboard session, so
// the dashboard's link to River UI works in a browser. The session cookie
// is SameSite=Strict, and a state-changing request on a session must say
// it comes from this origin.
func (s *Server) requireOperatorOrSession(next echo.HandlerFunc) echo.HandlerFunc {
	bearer := s.requireOperator(next)
	return func(c echo.Context) error {
		sess, err := s.currentSession(c)
		if errors.Is(err, errNoSession) || bearerToken(c.Request()) != "" {
			return bearer(c)
		}
		if err != nil {
			return err
		}
		r := c.Request()
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !s.sameOrigin(r, true) {
			return errCrossOrigin
		}
		c.Set(principalKey, operators.Principal{Name: sess.Operator, Credential: sess.Credential})
		return next(c)
	}
}

var errCrossOrigin = &HTTPError{Code: http.StatusForbidden, Msg: "cross-origin request refused (behind a TLS proxy? set GUARDIAN_PUBLIC_URL to the address operators use)"}

// sameOrigin reports whether r says it comes from this server's origin: the
// public URL when one is set, else this request's own scheme and host. A
// request without Origin passes only when required is false (a form post
// from an old browser, still bound by its CSRF token). Pages send
// Referrer-Policy same-origin, not no-referrer: under no-referrer a browser
// sends "Origin: null" on a form post, and this check could not pass.
func (s *Server) sameOrigin(r *http.Request, required bool) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return !required
	}
	want := s.origin
	if want == "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		want = scheme + "://" + r.Host
	}
	return strings.EqualFold(origin, want)
}

// limiterKey is the unit a limiter counts: an IPv4 address, or an IPv6
// address's /64, which one client usually holds whole.
func limiterKey(ip string) string {
	if parsed := net.ParseIP(ip); parsed != nil && parsed.To4() == nil {
		return parsed.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return ip
}

// retryAfter sets Retry-After for an error that carries a wait.
func retryAfter(c echo.Context, err error) {
	var wait errRetryAfter
	if errors.As(err, &wait) {
		c.Response().Header().Set("Retry-After", strconv.Itoa(int(time.Duration(wait).Seconds())))
	}
}
