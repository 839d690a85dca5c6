package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
	"github.com/countersign/countersign/static"
	"github.com/countersign/countersign/views/admin"
	"github.com/countersign/countersign/views/layout"
	"github.com/countersign/countersign/web/session"
)

// GroupService is what the reviewer-group page needs from the domain
// (*writes.Service). Every method acts on the administrator's tenant and
// answers EForbidden for anyone else.
type GroupService interface {
	Groups(ctx context.Context, admin models.User) ([]models.ReviewerGroup, error)
	CreateGroup(ctx context.Context, admin models.User, name string) (models.ReviewerGroup, error)
	SetGroupMember(ctx context.Context, admin models.User, group, userName string, member bool) (writes.GroupOutcome, error)
}

var _ GroupService = (*writes.Service)(nil)

// Groups serve /admin/groups. Build them with NewGroups.
type Groups struct {
	svc    GroupService
	users  AdminService
	assets layout.Assets
}

// NewGroups returns the reviewer-group page over svc; users lists the
// tenant's users for the member form.
func NewGroups(svc GroupService, users AdminService, assets *static.Assets) *Groups {
	return &Groups{svc: svc, users: users, assets: AssetsFor(assets)}
}

var groupNotices = map[string]string{
	"created": "The group was created.",
	"added":   "The member was added.",
	"removed": "The member was removed.",
}

// Page handles GET /admin/groups.
func (h *Groups) Page(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	notice := groupNotices[c.QueryParam("done")]
	if notice != "" {
		notice += proposalsNotice(c.QueryParam("moved"), c.QueryParam("confirmed"), c.QueryParam("pending"))
	}
	return h.page(c, s, http.StatusOK, "", notice)
}

// proposalsNotice tells, after a membership change, what it did to the
// waiting proposals the member had approved (GroupOutcome's counts, from
// the redirect's query); "" when it moved none.
func proposalsNotice(moved, confirmed, pending string) string {
	n := func(v string) int {
		i, err := strconv.Atoi(v)
		if err != nil || i < 0 {
			return 0
		}
		return i
	}
	m, c, p := n(moved), n(confirmed), n(pending)
	if m == 0 {
		return ""
	}
	out := fmt.Sprintf(" %d waiting %s they approved changed with it", m, plural(m, "proposal", "proposals"))
	switch {
	case c > 0 && p > 0:
		out += fmt.Sprintf(": %d confirmed, %d complete and confirmed once the business system answers", c, p)
	case c > 0:
		out += fmt.Sprintf(": %d confirmed", c)
	case p > 0:
		out += fmt.Sprintf(": %d complete and confirmed once the business system answers", p)
	}
	return out + "."
}

func (h *Groups) page(c echo.Context, s *session.Session, status int, formErr, notice string) error {
	ctx := c.Request().Context()
	groups, err := h.svc.Groups(ctx, s.User)
	if err != nil {
		return err
	}
	users, err := h.users.ListUsers(ctx, s.User)
	if err != nil {
		return err
	}
	p := admin.GroupsPage{Layout: layout.Page{Title: "Reviewer groups",
		User: frameUser(s),
		CSRF: s.CSRF, Active: "groups", Assets: h.assets}, Error: formErr, Notice: notice}
	for _, g := range groups {
		row := admin.GroupRow{Name: g.Name}
		for _, m := range g.Members {
			row.Members = append(row.Members, m.UserName)
		}
		p.Groups = append(p.Groups, row)
	}
	for _, u := range users {
		if !u.Disabled {
			p.Users = append(p.Users, u.Name)
		}
	}
	noStore(c)
	return render(c, status, admin.Groups(p))
}

// Create handles POST /admin/groups (field name).
func (h *Groups) Create(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	_, err = h.svc.CreateGroup(c.Request().Context(), s.User, c.FormValue("name"))
	if formRefusal(err) {
		return h.page(c, s, statusOf(err), models.ErrorMessage(err), "")
	}
	if err != nil {
		return err
	}
	return seeOther(c, "/admin/groups?done=created")
}

// Member handles POST /admin/groups/members (fields group, user and action
// add or remove).
func (h *Groups) Member(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	add := c.FormValue("action") != "remove"
	out, err := h.svc.SetGroupMember(c.Request().Context(), s.User, c.FormValue("group"), c.FormValue("user"), add)
	if models.IsCode(err, models.ENotFound) {
		return h.page(c, s, http.StatusUnprocessableEntity, models.ErrorMessage(err), "")
	}
	if err != nil {
		return err
	}
	q := url.Values{"done": {"removed"}}
	if add {
		q.Set("done", "added")
	}
	if out.Moved > 0 {
		q.Set("moved", strconv.Itoa(out.Moved))
		q.Set("confirmed", strconv.Itoa(out.Confirmed))
		q.Set("pending", strconv.Itoa(out.Pending))
	}
	return seeOther(c, "/admin/groups?"+q.Encode())
}
