package api

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// CancelProposal handles POST /api/v1/proposals/{id}/cancel: the proposing
// agent withdraws its proposal. Any body is ignored.
func (h *Handlers) CancelProposal(c echo.Context) error {
	agent, err := agentFrom(c)
	if err != nil {
		return err
	}
	p, err := h.p.Cancel(c.Request().Context(), agent, c.Param("id"))
	if err != nil {
		return err
	}
	c.Response().Header().Set("ETag", etag(p))
	return c.JSON(http.StatusOK, newProposalJSON(p, agent, h.clock.Now()))
}
