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
	users, err := h.svc.ListUsers(c.Request().Context(), s.User)
	if err != nil {
		return err
	}
	keys, err := h.svc.SecurityKeyCounts(c.Request().Context(), s.User)
	if err != nil {
		return err
	}
	p := admin.ReviewersPage{Layout: h.frame(s, "Reviewers", "reviewers"), Form: form, Error: formErr, Notice: notice}
	for _, u := range users {
		p.Users = append(p.Users, admin.UserRow{ID: u.ID, Name: u.Name, Role: string(u.Role),
			Created: h.when(u.CreatedAt), Disabled: u.Disabled, Self: u.ID == s.User.ID, Keys: keys[u.ID]})
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
		return err
	}
	done := "enabled"
	if disabled {
		done = "disabled"
	}
	return seeOther(c, "/admin/reviewers?done="+done)
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
