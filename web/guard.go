package web

import (
	"errors"
	"mime"
	"net/http"

	"github.com/labstack/echo/v4"
)

// maxFormBytes caps a dashboard form: the longest is a resolution's reason
// and evidence, a few KiB.
const maxFormBytes = 64 << 10

// maxRiverUIBody caps a request to River UI's API.
const maxRiverUIBody = 1 << 20

// Content-Security-Policy of River UI's pages: its scripts and styles come
// from its own prefix; React sets inline styles; nothing may frame it.
const riverUICSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"

// hsts is sent on every answer when operators reach Guardian over https.
const hsts = "max-age=63072000; includeSubDomains"

// secureHeaders sets the headers every answer carries.
func (s *Server) secureHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("X-Content-Type-Options", "nosniff")
		if s.secure {
			h.Set("Strict-Transport-Security", hsts)
		}
		return next(c)
	}
}

// formOnly guards a form post before anything reads it (readForm).
func (s *Server) formOnly(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := s.readForm(c); err != nil {
			return err
		}
		return next(c)
	}
}

// readForm checks and parses a dashboard form post: it must come from this
// origin, be URL-encoded (a multipart body would be parsed into memory and
// spilled to disk before any check), and fit maxFormBytes. Parsed here, a
// handler's FormValue never reads more. Other methods pass untouched.
func (s *Server) readForm(c echo.Context) error {
	r := c.Request()
	if r.Method != http.MethodPost {
		return nil
	}
	if !s.sameOrigin(r, false) {
		return errCrossOrigin
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/x-www-form-urlencoded" {
		return &HTTPError{Code: http.StatusUnsupportedMediaType, Msg: "forms must be application/x-www-form-urlencoded"}
	}
	r.Body = http.MaxBytesReader(c.Response(), r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return &HTTPError{Code: http.StatusRequestEntityTooLarge, Msg: "form too large", Err: err}
		}
		return &HTTPError{Code: http.StatusBadRequest, Msg: "unreadable form", Err: err}
	}
	return nil
}

// riverUIGuard sets River UI's security headers and caps its request bodies.
func riverUIGuard(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("Content-Security-Policy", riverUICSP)
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		r := c.Request()
		r.Body = http.MaxBytesReader(c.Response(), r.Body, maxRiverUIBody)
		return next(c)
	}
}
