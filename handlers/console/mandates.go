package console

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/static"
	"github.com/countersign/countersign/views/mandates"
)

// MandatesProtocol is what the mandates page needs from the domain
// (*writes.Service).
type MandatesProtocol interface {
	Mandates(ctx context.Context, tenantID string) ([]models.Mandate, error)
	RevokeMandate(ctx context.Context, admin models.User, id string) (models.Mandate, error)
}

// Mandates serve the standing mandates page and revocation. Build them
// with NewMandates.
type Mandates struct {
	*AdminHandlers
	svc   MandatesProtocol
	clock models.Clock
}

// NewMandates returns the mandates page; adminSvc supplies the page frame
// and the agents' names.
func NewMandates(svc MandatesProtocol, adminSvc AdminService, assets *static.Assets, clock models.Clock) *Mandates {
	return &Mandates{AdminHandlers: NewAdminHandlers(adminSvc, assets), svc: svc, clock: clock}
}

// Page handles GET /mandates: every mandate of the reviewer's tenant with
// its live usage; administrators may revoke the active ones.
func (h *Mandates) Page(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	ms, err := h.svc.Mandates(ctx, s.User.TenantID)
	if err != nil {
		return err
	}
	names := map[string]string{}
	if s.User.Role == models.RoleAdmin {
		if agents, err := h.AdminHandlers.svc.ListAgents(ctx, s.User); err == nil {
			for _, a := range agents {
				names[a.ID] = a.Name
			}
		}
	}
	now := h.clock.Now()
	p := mandates.Page{Layout: h.frame(s, "Mandates", "mandates")}
	if c.QueryParam("revoked") != "" {
		p.Notice = "The mandate was revoked: it confirms nothing more. Tokens it issued before follow the usual revoke rules."
	}
	for _, m := range ms {
		p.Rows = append(p.Rows, h.row(m, names, now, s.User.Role == models.RoleAdmin))
	}
	return render(c, http.StatusOK, mandates.List(p))
}

func (h *Mandates) row(m models.Mandate, names map[string]string, now time.Time, admin bool) mandates.Row {
	t := m.Terms
	var agents []string
	for _, a := range t.Agents {
		if n := names[a]; n != "" {
			a = n
		}
		agents = append(agents, a)
	}
	r := mandates.Row{ID: m.ID, ProposalID: m.ProposalID, Tool: t.Tool, Agents: strings.Join(agents, ", "),
		Live: m.Live(now), Grantors: strings.Join(m.GrantorNames, ", "), Granted: h.when(m.GrantedAt),
		Revocable: admin && m.Status == models.MandateActive}
	if preview, err := t.Preview(registry.FormatMoney, models.MandateNames{Agents: names}); err == nil {
		for _, f := range preview {
			switch f.Name {
			case "tool", "agents", "reason", "expires_at", "max_uses", "money.budget":
				continue
			}
			r.Terms = append(r.Terms, mandates.Term{Label: f.Label, Display: f.Display})
		}
		r.Terms = append(r.Terms, mandates.Term{Label: "Reason", Display: t.Reason})
	}
	r.Spent = "no budget"
	if mo := t.Money; mo != nil && mo.Budget > 0 {
		spent, _ := registry.FormatMoney(m.Spent, mo.Currency)
		budget, _ := registry.FormatMoney(mo.Budget, mo.Currency)
		r.Spent = spent + " / " + budget
	}
	r.Uses = fmt.Sprintf("%d", m.Uses)
	if t.MaxUses > 0 {
		r.Uses = fmt.Sprintf("%d / %d", m.Uses, t.MaxUses)
	}
	switch m.State(now) {
	case models.MandateStateRevoked:
		r.TimeLeft = "revoked"
	case models.MandateStateStopped:
		r.TimeLeft = "stopped: a grantor was disabled"
	case models.MandateStateExpired:
		r.TimeLeft = "expired"
	default:
		r.TimeLeft = left(t.ExpiresAt.Sub(now)) + " left"
	}
	return r
}

// left shows a duration to the minute, days first.
func left(d time.Duration) string {
	d = d.Truncate(time.Minute)
	days := int(d / (24 * time.Hour))
	d -= time.Duration(days) * 24 * time.Hour
	h, m := int(d/time.Hour), int((d%time.Hour)/time.Minute)
	switch {
	case days > 0:
		return fmt.Sprintf("%dd %dh", days, h)
	case h > 0:
		return fmt.Sprintf("%dh %dm", h, m)
	}
	return fmt.Sprintf("%dm", m)
}

// Revoke handles POST /mandates/{id}/revoke (administrators, CSRF).
// Other tenants' ids are not found.
func (h *Mandates) Revoke(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	if _, err := h.svc.RevokeMandate(c.Request().Context(), s.User, c.Param("id")); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/mandates?revoked=1")
}
