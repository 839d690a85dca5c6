package console

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/views/admin"
	"github.com/countersign/countersign/views/layout"
	"github.com/countersign/countersign/web/session"
)

// reviewerNotices are the messages a redirect back to the list may ask for.
var reviewerNotices = map[string]string{
	"disabled": "The account was disabled and signed out everywhere; its approvals of proposals still awaiting confirmation no longer count.",
	"enabled":  "The account was enabled; its owner can sign in again.",
	"admin":    "The account is an administrator now, from its next page on; its sessions stay signed in.",
	"reviewer": "The account is a reviewer now and can no longer open the administration pages; its sessions stay signed in.",
}

// Reviewers handles GET /admin/reviewers: the tenant's console users and
// the create form.
func (h *AdminHandlers) Reviewers(c echo.Context) error {
	s, err := h.admin(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	return h.reviewersPage(c, s, http.StatusOK, admin.UserForm{}, "", reviewerNotices[c.QueryParam("done")])
}

func (h *AdminHandlers) reviewersPage(c echo.Context, s *session.Session, status int, form admin.UserForm, formErr, notice string) error {
	return h.reviewersPageRefused(c, s, status, form, formErr, notice, "")
}

// reviewersPageRefused is the list with refused saying, above it, why a
// change of a user was refused.
func (h *AdminHandlers) reviewersPageRefused(c echo.Context, s *session.Session, status int, form admin.UserForm, formErr, notice, refused string) error {
	users, err := h.svc.ListUsers(c.Request().Context(), s.User)
	if err != nil {
		return err
	}
	keys, err := h.svc.SecurityKeyCounts(c.Request().Context(), s.User)
	if err != nil {
		return err
	}
	p := admin.ReviewersPage{Layout: h.frame(s, "Reviewers", "reviewers"), Form: form, Error: formErr, Notice: notice, Refused: refused}
	active := 0
	for _, u := range users {
		if u.Role == models.RoleAdmin && !u.Disabled {
			active++
		}
	}
	for _, u := range users {
		p.Users = append(p.Users, admin.UserRow{ID: u.ID, Name: u.Name, Role: string(u.Role),
			Created: h.when(u.CreatedAt), Disabled: u.Disabled, Self: u.ID == s.User.ID, Keys: keys[u.ID],
			LastAdmin: active == 1 && u.Role == models.RoleAdmin && !u.Disabled})
	}
	return render(c, status, admin.Reviewers(p))
}

// CreateReviewer handles POST /admin/reviewers: creates the user with a
// generated password and shows it once. A bad or taken name re-renders the
// form with the reason.
func (h *AdminHandlers) CreateReviewer(c echo.Context) error {
	s, err := h.admin(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	form := admin.UserForm{Name: c.FormValue("name"), Role: c.FormValue("role")}
	u, pw, err := h.svc.CreateUser(c.Request().Context(), s.User, form.Name, models.Role(form.Role))
	if formRefusal(err) {
		return h.reviewersPage(c, s, statusOf(err), form, models.ErrorMessage(err), "")
	}
	if err != nil {
		return err
	}
	return h.passwordPage(c, s, u, pw, true)
}

// DisableReviewer handles POST /admin/reviewers/{id}/disable: the user can
// no longer sign in and every session of theirs ends.
func (h *AdminHandlers) DisableReviewer(c echo.Context) error {
	return h.setDisabled(c, true)
}

// EnableReviewer handles POST /admin/reviewers/{id}/enable.
func (h *AdminHandlers) EnableReviewer(c echo.Context) error {
	return h.setDisabled(c, false)
}

func (h *AdminHandlers) setDisabled(c echo.Context, disabled bool) error {
	s, err := h.admin(c)
	if err != nil {
		return err
	}
	if _, err := h.svc.SetUserDisabled(c.Request().Context(), s.User, c.Param("id"), disabled); err != nil {
		return h.refused(c, s, err)
	}
	done := "enabled"
	if disabled {
		done = "disabled"
	}
	return seeOther(c, "/admin/reviewers?done="+done)
}

// ChangeRole handles POST /admin/reviewers/{id}/role with the form field
// role (reviewer or admin). The user's sessions stay and read the new role
// at their next request. An administrator who made themselves a reviewer
// goes to the pending list, since the reviewers page is no longer theirs.
// Taking the role of the last active administrator is refused on the list
// with the reason (403).
func (h *AdminHandlers) ChangeRole(c echo.Context) error {
	s, err := h.admin(c)
	if err != nil {
		return err
	}
	role := models.Role(c.FormValue("role"))
	u, err := h.svc.SetUserRole(c.Request().Context(), s.User, c.Param("id"), role)
	if err != nil {
		return h.refused(c, s, err)
	}
	if u.ID == s.User.ID && u.Role != models.RoleAdmin {
		return seeOther(c, "/")
	}
	return seeOther(c, "/admin/reviewers?done="+string(u.Role))
}

// refused answers a refused change of a user: a refusal the administrator
// can act on (forbidden: the last active administrator, or their own
// account; a bad role) is shown on the list, above it, with the status
// the error maps to; anything else, or a list the actor may no longer
// see, is the error page.
func (h *AdminHandlers) refused(c echo.Context, s *session.Session, err error) error {
	switch models.ErrorCode(err) {
	case models.EForbidden, models.EInvalidRequest:
	default:
		return err
	}
	h = h.as(s)
	perr := h.reviewersPageRefused(c, s, statusOf(err), admin.UserForm{}, "", "", models.ErrorMessage(err))
	if models.IsCode(perr, models.EForbidden) {
		// The actor is no administrator any more: the refusal says so.
		return err
	}
	return perr
}

// ResetPassword handles POST /admin/reviewers/{id}/password: a new
// generated password, shown once; the old one stops working and the user's
// sessions end. An administrator resetting their own password ends their
// own session with it, so the page is shown signed out and leads to the
// sign-in page rather than offering links that would land there anyway.
func (h *AdminHandlers) ResetPassword(c echo.Context) error {
	s, err := h.admin(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	u, pw, err := h.svc.ResetPassword(c.Request().Context(), s.User, c.Param("id"))
	if err != nil {
		return err
	}
	if u.ID == s.User.ID {
		c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
		return render(c, http.StatusOK, admin.Password(admin.PasswordPage{
			Layout: layout.Page{Title: "Your new password", Assets: h.assets}, UserName: u.Name, Password: pw, Own: true}))
	}
	return h.passwordPage(c, s, u, pw, false)
}

func (h *AdminHandlers) passwordPage(c echo.Context, s *session.Session, u models.User, pw string, created bool) error {
	c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
	title := "New password for " + u.Name
	return render(c, http.StatusOK, admin.Password(admin.PasswordPage{
		Layout: h.frame(s, title, "reviewers"), UserName: u.Name, Password: pw, Created: created}))
}
