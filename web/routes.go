package web

import (
	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/handlers/api"
)

// routes is the one route table: every route the server answers is here.
func routes(e *echo.Echo, a *api.Handlers) {
	// Public.
	e.GET("/healthz", a.Healthz)
	e.GET("/.well-known/jwks.json", a.JWKS)

	// Agent API (SPEC sections 3 and 7): Bearer agent key, never cached.
	// The middleware goes on each route, not on the group: echo gives a
	// group with middleware a catch-all route, which would turn every 405
	// under /api/v1 into a 404.
	agent := []echo.MiddlewareFunc{api.NoStore, a.RequireAgent}
	v1 := e.Group("/api/v1")
	v1.POST("/proposals", a.Propose, agent...)
	v1.GET("/proposals", a.ListProposals, agent...)
	v1.GET("/proposals/:id", a.GetProposal, agent...)
	v1.POST("/proposals/:id/cancel", a.CancelProposal, agent...)
	v1.POST("/executions", a.Execute, agent...)

	// ---- Console (SPEC section 8) ----------------------------------------
	// Reviewer console routes are added here: /login, /logout, /,
	// /proposals/:id, /history, /settings/keys and /static/*, with session
	// and CSRF middleware on their own group. errorHandler must then render
	// HTML for them (see the note there).
}
