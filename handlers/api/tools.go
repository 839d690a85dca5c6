package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/registry"
)

// ToolExporter renders the tool registry for agents; *registry.Registry
// implements it.
type ToolExporter interface {
	// Export renders every tool in format (EInvalidRequest for an unknown
	// one).
	Export(format registry.ExportFormat) ([]byte, error)
}

// ListTools handles GET /api/v1/tools[?format=countersign|openai|anthropic]:
// the registry's tools with their strict schemas, side effects and risk
// tiers, or ready-made function definitions for OpenAI or Anthropic. The
// body is exactly what `countersign tools export` prints.
func (h *Handlers) ListTools(c echo.Context) error {
	if _, err := agentFrom(c); err != nil {
		return err
	}
	if h.tools == nil {
		return models.Errorf(models.ENotFound, "this server has no tool listing")
	}
	format, err := registry.ParseExportFormat(c.QueryParam("format"))
	if err != nil {
		return err
	}
	b, err := h.tools.Export(format)
	if err != nil {
		return err
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, b)
}
