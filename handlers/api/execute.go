package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
)

type executeRequest struct {
	ProposalID string `json:"proposal_id"`
	Token      string `json:"token"`
}

// Execute handles POST /api/v1/executions: redeems a confirmation token. The
// answer is 200 once the execution is settled (succeeded or
// failed_terminal) and 202 while its outcome is open (executing, unknown,
// failed_retryable); the agent then polls the proposal.
func (h *Handlers) Execute(c echo.Context) error {
	agent, err := agentFrom(c)
	if err != nil {
		return err
	}
	var req executeRequest
	if err := h.decodeJSON(c, &req); err != nil {
		return err
	}
	if req.ProposalID == "" {
		return models.Errorf(models.EInvalidRequest, "field \"proposal_id\" is required")
	}
	if req.Token == "" {
		return models.Errorf(models.EInvalidRequest, "field \"token\" is required")
	}
	e, err := h.p.Execute(c.Request().Context(), agent, req.ProposalID, req.Token)
	if err != nil {
		return err
	}
	status := http.StatusAccepted
	if e.Settled() {
		status = http.StatusOK
	}
	return c.JSON(status, executeResponse{executionJSON: newExecutionJSON(e), Receipt: receipt(e), SignedReceipt: e.ReceiptJWS})
}
