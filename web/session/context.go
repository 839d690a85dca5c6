// Package session signs reviewers in and out of the console and protects
// every console request: gorilla/sessions cookies that carry only a random
// session id, server-side session records with idle and absolute timeouts,
// CSRF tokens, security headers and login rate limiting.
package session

import (
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
)

// Session is a signed-in console user's session, as loaded for one request.
type Session struct {
	ID        string // the session's handle (models.Session.Handle), never the cookie's secret
	User      models.User
	Tenant    models.Tenant
	CSRF      string   // the synchronizer token every state-changing request must carry
	AMR       []string // how the user signed in, e.g. ["pwd"]
	CreatedAt time.Time
	LastSeen  time.Time
	ExpiresAt time.Time // absolute end, whatever the activity
}

const contextKey = "countersign.session"

// From returns the request's session, or nil when nobody is signed in.
func From(c echo.Context) *Session {
	s, _ := c.Get(contextKey).(*Session)
	return s
}

// Set attaches s to the request. The session middleware calls it; handler
// tests may too.
func Set(c echo.Context, s *Session) { c.Set(contextKey, s) }
