package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/handlers/api"
	"github.com/countersign/countersign/handlers/mcpserver"
)

// getHead is GET and HEAD: every route that answers GET answers HEAD the
// same way, headers and status included (RFC 9110 section 9.3.2); net/http
// drops the body of a HEAD answer.
var getHead = []string{http.MethodGet, http.MethodHead}

// routes is the one route table: every route the server answers is here.
// con is nil when the console is off.
func routes(e *echo.Echo, a *api.Handlers, mcp http.Handler, con *consoleHandlers) {
	// Public.
	e.Match(getHead, "/healthz", a.Healthz)
	e.Match(getHead, "/.well-known/jwks.json", a.JWKS)

	// Agent API (SPEC sections 3 and 7): Bearer agent key, never cached.
	// The middleware goes on each route, not on the group: echo gives a
	// group with middleware a catch-all route, which would turn every 405
	// under /api/v1 into a 404.
	agent := []echo.MiddlewareFunc{api.NoStore, a.RequireAgent}
	v1 := e.Group("/api/v1")
	v1.POST("/proposals", a.Propose, agent...)
	v1.Match(getHead, "/proposals", a.ListProposals, agent...)
	v1.Match(getHead, "/proposals/:id", a.GetProposal, agent...)
	v1.POST("/proposals/:id/cancel", a.CancelProposal, agent...)
	v1.POST("/executions", a.Execute, agent...)
	if a.HasMandates() {
		v1.POST("/mandates", a.RequestMandate, agent...)
		v1.Match(getHead, "/mandates/:id", a.GetMandate, agent...)
	}
	if a.HasEvents() {
		// Webhook endpoints of the calling agent, and its event stream.
		v1.POST("/webhooks", a.CreateWebhook, agent...)
		v1.Match(getHead, "/webhooks", a.ListWebhooks, agent...)
		v1.DELETE("/webhooks/:id", a.DeleteWebhook, agent...)
		v1.Match(getHead, "/events", a.Events, agent...)
	}
	v1.Match(getHead, "/tools", a.ListTools, agent...)
	v1.Match(getHead, "/openapi.json", a.OpenAPI)

	// MCP (streamable HTTP): the same agent key, checked on every request
	// as for the API (a refusal is the API's JSON error); the handler binds
	// each MCP session to that agent.
	if mcp != nil {
		h := echo.WrapHandler(mcp)
		m := []echo.MiddlewareFunc{api.NoStore, a.RequireAgent, mcpAgent}
		e.POST("/mcp", h, m...)
		e.Match(getHead, "/mcp", h, m...)
		e.DELETE("/mcp", h, m...)
	}
	if a.ServesAudit() {
		// Receipts for the tenant's agents and audit readers; the audit
		// log for audit readers only (see countersign audit key).
		v1.Match(getHead, "/executions/:id/receipt", a.Receipt, api.NoStore, a.RequireReader(true))
		v1.Match(getHead, "/audit", a.AuditLog, api.NoStore, a.RequireReader(false))
	}

	// ---- Console (SPEC section 8) ----------------------------------------
	if con == nil {
		return
	}
	e.Match(getHead, "/static/*", echo.WrapHandler(con.assets.Handler()))

	// Middleware per route, as for the API. Load attaches the session;
	// RequireUser sends anonymous visitors to /login; CSRF refuses
	// state-changing requests without the session's token before anything
	// changes; RequireAdmin answers 403 to reviewers.
	m := con.sessions
	page := []echo.MiddlewareFunc{m.Load, m.RequireUser}
	// What a page fetches by itself is not a person's activity: it does
	// not keep the session alive.
	background := []echo.MiddlewareFunc{m.LoadBackground, m.RequireUser}
	form := []echo.MiddlewareFunc{m.Load, m.RequireUser, m.CSRF}
	adminPage := []echo.MiddlewareFunc{m.Load, m.RequireUser, m.RequireAdmin}
	adminForm := []echo.MiddlewareFunc{m.Load, m.RequireUser, m.CSRF, m.RequireAdmin}

	// Sign-in. The form has no session yet: its CSRF token lives in a
	// short-lived signed cookie of its own.
	e.Match(getHead, "/login", con.auth.LoginPage, m.Load)
	e.POST("/login", con.auth.Login, m.LoginCSRF)
	e.POST("/logout", con.auth.Logout, form...)
	if pk := con.passkeys; pk != nil {
		// Passkey sign-in: JSON, the sign-in form's token in X-CSRF-Token.
		e.POST("/login/passkey/begin", pk.Begin, m.LoginCSRF)
		e.POST("/login/passkey/finish", pk.Finish, m.LoginCSRF)
	}

	// Reviewer pages.
	if p := con.pages; p != nil {
		e.Match(getHead, "/", p.Pending, page...)
		e.Match(getHead, "/pending/rows", p.PendingRows, background...)
		e.Match(getHead, "/events", p.Events, background...)
		e.Match(getHead, "/proposals/:id", p.Proposal, page...)
		e.Match(getHead, "/proposals/:id/live", p.ProposalLive, background...)
		e.POST("/proposals/:id/approve", p.Approve, form...)
		e.POST("/proposals/:id/decline", p.Decline, form...)
		e.POST("/proposals/:id/edit", p.Counter, form...)
		e.POST("/proposals/:id/revoke", p.Revoke, form...)
		e.Match(getHead, "/history", p.History, page...)
		if con.keys != nil {
			// Security-key approval (SPEC section 6): JSON in and out,
			// the CSRF token in the X-CSRF-Token header.
			e.POST("/proposals/:id/stepup/begin", p.StepUpBegin, form...)
			e.POST("/proposals/:id/stepup/finish", p.StepUpFinish, form...)
		}
	}

	// Security keys and passkeys of the signed-in reviewer. Removing one
	// takes a fresh security-key confirmation.
	if k := con.keys; k != nil {
		e.Match(getHead, "/settings/keys", k.Page, page...)
		e.POST("/settings/keys/register/begin", k.RegisterBegin, form...)
		e.POST("/settings/keys/register/finish", k.RegisterFinish, form...)
		e.POST("/settings/keys/:id/rename", k.Rename, form...)
		e.POST("/settings/keys/:id/remove/begin", k.RemoveBegin, form...)
		e.POST("/settings/keys/:id/remove/finish", k.RemoveFinish, form...)
	}

	// The reviewer's time zone.
	e.Match(getHead, "/settings/zone", con.zones.Page, page...)
	e.POST("/settings/zone", con.zones.Save, form...)

	// Receipts and the audit log.
	if au := con.audit; au != nil {
		e.Match(getHead, "/executions/:id/receipt.jws", au.DownloadReceipt, page...)
		e.Match(getHead, "/proposals/:id/audit", au.ProposalAudit, page...)
		e.Match(getHead, "/audit", au.TenantAudit, adminPage...)
	}
	// Standing mandates: every reviewer sees them; administrators revoke.
	if md := con.mandates; md != nil {
		e.Match(getHead, "/mandates", md.Page, page...)
		e.POST("/mandates/:id/revoke", md.Revoke, adminForm...)
	}

	// Administration: agents and reviewers of the admin's own tenant.
	ad := con.admin
	e.Match(getHead, "/admin/agents", ad.Agents, adminPage...)
	e.POST("/admin/agents", ad.CreateAgent, adminForm...)
	e.POST("/admin/agents/:id/revoke", ad.RevokeAgent, adminForm...)
	e.Match(getHead, "/admin/reviewers", ad.Reviewers, adminPage...)
	e.POST("/admin/reviewers", ad.CreateReviewer, adminForm...)
	e.POST("/admin/reviewers/:id/disable", ad.DisableReviewer, adminForm...)
	e.POST("/admin/reviewers/:id/enable", ad.EnableReviewer, adminForm...)
	e.POST("/admin/reviewers/:id/role", ad.ChangeRole, adminForm...)
	e.POST("/admin/reviewers/:id/password", ad.ResetPassword, adminForm...)
	if gr := con.groups; gr != nil {
		e.Match(getHead, "/admin/groups", gr.Page, adminPage...)
		e.POST("/admin/groups", gr.Create, adminForm...)
		e.POST("/admin/groups/members", gr.Member, adminForm...)
	}
	if wh := con.webhooks; wh != nil {
		e.Match(getHead, "/admin/webhooks", wh.Page, adminPage...)
		e.POST("/admin/webhooks", wh.Create, adminForm...)
		e.POST("/admin/webhooks/:id/disable", wh.Disable, adminForm...)
		e.Match(getHead, "/admin/deliveries/:id", wh.Delivery, adminPage...)
		e.POST("/admin/deliveries/:id/redeliver", wh.Redeliver, adminForm...)
	}
}

// operatorRoutes are the operator's, not the API's or the console's:
// /metrics exists only when configured (and protects itself).
func operatorRoutes(e *echo.Echo, metrics http.Handler) {
	if metrics != nil {
		e.Match(getHead, "/metrics", echo.WrapHandler(metrics))
	}
}

// mcpAgent hands the agent RequireAgent authenticated to the MCP handler
// in the request's context.
func mcpAgent(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		agent, err := api.AgentFrom(c)
		if err != nil {
			return err
		}
		r := c.Request()
		c.SetRequest(r.WithContext(mcpserver.WithAgent(r.Context(), agent)))
		return next(c)
	}
}
