package api

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
)

// AuditProtocol is what the receipt and audit endpoints need from the
// domain (*writes.Service).
type AuditProtocol interface {
	// AuthenticateAuditReader resolves an audit reader key ("csa_…").
	AuthenticateAuditReader(ctx context.Context, key string) (models.AuditReader, error)
	// Receipt returns a settled execution's signed receipt and its claims.
	Receipt(ctx context.Context, tenantID, executionID string) (string, models.SignedReceipt, error)
	// AgentReceipt is Receipt for an agent, which reads only the receipts
	// of the writes it may read (models.Agent.MayRead).
	AgentReceipt(ctx context.Context, agent models.Agent, executionID string) (string, models.SignedReceipt, error)
	// AuditEntries returns the tenant's audit entries after a position and
	// the newest checkpoint.
	AuditEntries(ctx context.Context, tenantID string, after int64, limit int) ([]models.AuditEntry, models.Checkpoint, bool, error)
}

// tenantKey is where RequireReader leaves the tenant of the caller.
const tenantKey = "countersign.api.tenant"

// RequireReader authenticates an audit reader ("Authorization: Bearer
// csa_…") or, when agents are allowed, an agent of the tenant, and records
// the caller's tenant. Agent keys never read the audit log: that route
// passes agents=false.
func (h *Handlers) RequireReader(agents bool) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			key, err := bearerKey(c.Request().Header.Get(echo.HeaderAuthorization))
			if err != nil {
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="countersign"`)
				return err
			}
			ctx := c.Request().Context()
			var tenant string
			switch {
			case h.audit == nil:
				return models.Errorf(models.ENotFound, "the audit log is not served here")
			case strings.HasPrefix(key, writes.AuditKeyPrefix):
				r, err := h.audit.AuthenticateAuditReader(ctx, key)
				if err != nil {
					c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="countersign", error="invalid_token"`)
					return err
				}
				tenant = r.TenantID
			case agents:
				a, err := h.p.AuthenticateAgent(ctx, key)
				if err != nil {
					c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="countersign", error="invalid_token"`)
					return err
				}
				tenant = a.TenantID
				c.Set(agentKey, a)
			default:
				return models.Errorf(models.EForbidden, "the audit log is read with an audit reader key (countersign audit key), not an agent key")
			}
			c.Set(tenantKey, tenant)
			return next(c)
		}
	}
}

func tenantFrom(c echo.Context) (string, error) {
	t, ok := c.Get(tenantKey).(string)
	if !ok || t == "" {
		return "", models.Wrap(models.EInternal, errNoAgent, "internal error")
	}
	return t, nil
}

type receiptResponse struct {
	ExecutionID string               `json:"execution_id"`
	Receipt     string               `json:"receipt"`
	Claims      models.SignedReceipt `json:"claims"`
}

// Receipt handles GET /api/v1/executions/:id/receipt: the signed receipt of
// a settled execution of the caller's tenant, for audit readers, and for
// agents the receipts of the writes they may read (their own, or all with
// tenant-wide read). 404 for unknown and other tenants' executions and for
// another agent's, 409 while it is not settled.
func (h *Handlers) Receipt(c echo.Context) error {
	tenant, err := tenantFrom(c)
	if err != nil {
		return err
	}
	id := c.Param("id")
	ctx := c.Request().Context()
	var compact string
	var claims models.SignedReceipt
	if agent, ok := c.Get(agentKey).(models.Agent); ok {
		compact, claims, err = h.audit.AgentReceipt(ctx, agent, id)
	} else {
		compact, claims, err = h.audit.Receipt(ctx, tenant, id)
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, receiptResponse{ExecutionID: id, Receipt: compact, Claims: claims})
}

type auditEntryJSON struct {
	Seq        int64  `json:"seq"`
	Hash       string `json:"hash"`
	Prev       string `json:"prev"`
	Kind       string `json:"kind"`
	ProposalID string `json:"proposal_id"`
	At         string `json:"at"`
	// Body is the entry exactly as hashed: hash = sha256 of its UTF-8 bytes.
	Body string `json:"body"`
}

type checkpointJSON struct {
	Seq  int64  `json:"seq"`
	Hash string `json:"hash"`
	JWS  string `json:"jws"`
}

type auditResponse struct {
	Entries []auditEntryJSON `json:"entries"`
	// NextAfter is the after= of the next page: the last seq returned, or
	// the request's after when there was nothing new.
	NextAfter  int64           `json:"next_after"`
	Checkpoint *checkpointJSON `json:"checkpoint"`
}

// AuditLog handles GET /api/v1/audit?after=SEQ&limit=N for audit readers:
// the tenant's chain in order from after+1 (at most limit, default and
// maximum 1000), with the newest signed checkpoint. Polling with the
// returned next_after streams the log.
func (h *Handlers) AuditLog(c echo.Context) error {
	tenant, err := tenantFrom(c)
	if err != nil {
		return err
	}
	after, err := queryInt(c, "after", 0)
	if err != nil {
		return err
	}
	limit, err := queryInt(c, "limit", 1000)
	if err != nil {
		return err
	}
	if limit < 1 || limit > 1000 {
		return models.Errorf(models.EInvalidRequest, "limit must be 1 to 1000")
	}
	entries, cp, ok, err := h.audit.AuditEntries(c.Request().Context(), tenant, after, int(limit))
	if err != nil {
		return err
	}
	out := auditResponse{Entries: make([]auditEntryJSON, 0, len(entries)), NextAfter: after}
	for _, e := range entries {
		out.Entries = append(out.Entries, auditEntryJSON{Seq: e.Seq, Hash: e.Hash, Prev: e.Prev, Kind: e.Kind,
			ProposalID: e.ProposalID, At: timestamp(e.CreatedAt), Body: e.Body})
		out.NextAfter = e.Seq
	}
	if ok {
		out.Checkpoint = &checkpointJSON{Seq: cp.Seq, Hash: cp.Hash, JWS: cp.JWS}
	}
	return c.JSON(http.StatusOK, out)
}

func queryInt(c echo.Context, name string, def int64) (int64, error) {
	v := c.QueryParam(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, models.Errorf(models.EInvalidRequest, "%s must be a non-negative integer", name)
	}
	return n, nil
}
