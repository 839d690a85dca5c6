package api

import (
	"bytes"
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// openAPIDocument is the OpenAPI 3.1 description of the agent API. Every
// response the test suites receive from the API is validated against it
// (internal/apitest), so a status, field or error code the document does
// not list fails a test.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPIDocument returns the OpenAPI 3.1 document of the agent API. The
// caller may modify the returned slice.
func OpenAPIDocument() []byte { return bytes.Clone(openAPIDocument) }

// OpenAPI handles GET /api/v1/openapi.json. Public: it describes the API
// and holds nothing secret.
func (h *Handlers) OpenAPI(c echo.Context) error {
	c.Response().Header().Set(echo.HeaderCacheControl, "public, max-age=300")
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openAPIDocument)
}
