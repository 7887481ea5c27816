package web

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

// HTTPError is an error with what the client may see (Code, Msg) separated
// from what only the log gets (Err).
type HTTPError struct {
	Code int
	Msg  string
	Err  error
}

func (e *HTTPError) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *HTTPError) Unwrap() error { return e.Err }

// answerer is an error that knows the answer a client gets for it.
type answerer interface {
	error
	answer() (code int, body any)
}

func (e *HTTPError) answer() (int, any) { return e.Code, map[string]string{"error": e.Msg} }

func errorHandler(logger *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		code, body := http.StatusInternalServerError, any(map[string]string{"error": "internal error"})
		var ae answerer
		var ee *echo.HTTPError
		switch {
		case errors.As(err, &ae):
			code, body = ae.answer()
		case errors.As(err, &ee):
			code = ee.Code
			msg, ok := ee.Message.(string)
			if !ok {
				msg = http.StatusText(code)
			}
			body = map[string]string{"error": msg}
		}
		level := slog.LevelDebug
		if code >= 500 {
			level = slog.LevelError
		}
		logger.Log(c.Request().Context(), level, "request failed",
			"method", c.Request().Method, "path", redactPath(c.Request().URL.Path), "status", code, "error", err)
		retryAfter(c, err)
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(code)
			return
		}
		_ = c.JSON(code, body)
	}
}

// redactPath is a request path as logs may show it: a redemption token in
// the path is a bearer secret, so it is replaced.
func redactPath(path string) string {
	rest, ok := strings.CutPrefix(path, "/tokens/")
	if !ok {
		return path
	}
	_, tail, _ := strings.Cut(rest, "/")
	if tail == "" {
		return "/tokens/[redacted]"
	}
	return "/tokens/[redacted]/" + tail
}
