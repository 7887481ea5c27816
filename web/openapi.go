package web

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// openAPI is the operator API's OpenAPI 3 document. web/openapi_test.go
// holds it to the real handlers: every route documented, every documented
// route answering with the documented shapes.
//
//go:embed spec/openapi.json
var openAPI []byte

// OpenAPI returns the operator API's OpenAPI 3 document.
func OpenAPI() []byte { return openAPI }

func (s *Server) apiOpenAPI(c echo.Context) error {
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openAPI)
}
