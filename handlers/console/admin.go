package console

import (
	"context"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/static"
	"github.com/countersign/countersign/views/layout"
	"github.com/countersign/countersign/web/session"
)

// AdminService is what the admin pages need from the domain
// (*auth.Service). Every method acts on the actor's tenant only, answers
// EForbidden unless the actor is an admin, and ENotFound for other
// tenants' ids.
type AdminService interface {
	ListUsers(ctx context.Context, actor models.User) ([]models.User, error)
	// SecurityKeyCounts counts each user's keys that may approve.
	SecurityKeyCounts(ctx context.Context, actor models.User) (map[string]int, error)
	// CreateUser returns the new user and its generated password.
	CreateUser(ctx context.Context, actor models.User, name string, role models.Role) (models.User, string, error)
	SetUserDisabled(ctx context.Context, actor models.User, userID string, disabled bool) (models.User, error)
	// SetUserRole answers EForbidden, too, for taking the role of the
	// tenant's last active administrator.
	SetUserRole(ctx context.Context, actor models.User, userID string, role models.Role) (models.User, error)
	// ResetPassword returns the user and its new generated password.
	ResetPassword(ctx context.Context, actor models.User, userID string) (models.User, string, error)
	ListAgents(ctx context.Context, actor models.User) ([]models.Agent, error)
	// CreateAgent returns the new agent and its API key.
	CreateAgent(ctx context.Context, actor models.User, name, ownerUserID string) (models.Agent, string, error)
	RevokeAgent(ctx context.Context, actor models.User, agentID string) (models.Agent, error)
}

var _ AdminService = (*auth.Service)(nil)

// AdminHandlers serve the administrators' pages: agents and reviewers.
// Build them with NewAdminHandlers.
type AdminHandlers struct {
	svc    AdminService
	assets layout.Assets
	loc    *time.Location
}

// NewAdminHandlers returns the admin pages over svc.
func NewAdminHandlers(svc AdminService, assets *static.Assets) *AdminHandlers {
	return &AdminHandlers{svc: svc, assets: AssetsFor(assets), loc: time.UTC}
}

// admin returns the request's session; the routes run RequireUser and
// RequireAdmin first, and the service re-checks the role.
func (h *AdminHandlers) admin(c echo.Context) (*session.Session, error) {
	return signedIn(c)
}

// as returns the handlers as admin s reads them: times in s's zone.
func (h *AdminHandlers) as(s *session.Session) *AdminHandlers {
	c := *h
	c.loc = s.User.Location()
	return &c
}

func (h *AdminHandlers) frame(s *session.Session, title, active string) layout.Page {
	return layout.Page{
		Title:  title,
		User:   frameUser(s),
		CSRF:   s.CSRF,
		Active: active,
		Assets: h.assets,
	}
}

func (h *AdminHandlers) when(t time.Time) string {
	return t.In(h.loc).Format("2006-01-02 15:04 MST")
}

// formRefusal reports whether err is a refusal the form shows next to
// itself (bad input, a name taken) rather than an error page.
func formRefusal(err error) bool {
	switch models.ErrorCode(err) {
	case models.EInvalidRequest, models.EAlreadyExists:
		return true
	}
	return false
}
