package console_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/handlers/console"
	"github.com/countersign/countersign/static"
)

// The audit pages and the error page read like every other page: the
// header names the reader's zone (a link to change it), and the audit
// entries' and the signed checkpoint's times are in that zone, never as
// raw RFC 3339.
func TestAuditAndErrorPagesShowTheReadersZone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := *e.sessions["alice"]
	s.User.TimeZone = "Asia/Shanghai"
	e.sessions["alice"] = &s
	audit := console.NewAuditPages(e.svc, static.New())
	e.echo.GET("/proposals/:id/audit", audit.ProposalAudit)
	e.echo.GET("/audit", audit.TenantAudit)
	errs := console.NewAuthHandlers(nil, nil, static.New(), console.AuthOptions{})
	e.echo.GET("/broken", func(c echo.Context) error { return errs.ErrorPage(c, http.StatusNotFound, "No such page.") })

	p := e.refund("ord_1001", 100)
	if _, err := e.svc.Checkpoint(e.ctx); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/proposals/" + p.ID + "/audit", "/audit", "/broken"} {
		r := e.get(path, "alice")
		if path == "/broken" {
			wantStatus(t, r, http.StatusNotFound)
		} else {
			wantStatus(t, r, http.StatusOK)
		}
		if got := text(one(t, r.doc, "zone-link")); got != "Asia/Shanghai" {
			t.Errorf("%s: the header's zone link = %q, want Asia/Shanghai", path, got)
		}
		if path == "/broken" {
			continue
		}
		// start is 06:20 UTC: 14:20 in Shanghai.
		if got, want := text(one(t, r.doc, "checkpoint-at")), "2026-09-01 14:20:00 CST"; got != want {
			t.Errorf("%s: checkpoint signed %q, want %q", path, got, want)
		}
		wantContains(t, path+" entry", text(all(r.doc, "audit-entry")[0]), "2026-09-01 14:20:00.000 CST")
	}
}
