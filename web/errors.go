package web

import (
	"errors"
	"log/slog"
	"net/http"

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

func errorHandler(logger *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		code, msg := http.StatusInternalServerError, "internal error"
		var he *HTTPError
		var ee *echo.HTTPError
		var ce *conflictError
		if errors.As(err, &ce) {
			_ = c.JSON(http.StatusConflict, ResolveConflict{Error: ce.Error(), State: ce.state})
			return
		}
		switch {
		case errors.As(err, &he):
			code, msg = he.Code, he.Msg
		case errors.As(err, &ee):
			code = ee.Code
			if m, ok := ee.Message.(string); ok {
				msg = m
			} else {
				msg = http.StatusText(code)
			}
		}
		level := slog.LevelDebug
		if code >= 500 {
			level = slog.LevelError
		}
		logger.Log(c.Request().Context(), level, "request failed",
			"method", c.Request().Method, "path", c.Request().URL.Path, "status", code, "error", err)
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(code)
			return
		}
		_ = c.JSON(code, map[string]string{"error": msg})
	}
}
