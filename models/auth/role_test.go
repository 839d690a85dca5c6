package auth_test

import (
	"context"
	"testing"

	"github.com/countersign/countersign/models"
)

// An administrator changes a reviewer's role, and the reviewer's session
// reads it at its next request, without signing in again; the session of
// an administrator who was demoted is a reviewer's at once, and the
// service refuses them. The last active administrator keeps the role.
func TestSetUserRole(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		s, err := e.svc.Login(ctx, "acme", "alice", alicePW, "192.0.2.1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.SetUserRole(ctx, e.alice, e.alice.ID, models.RoleAdmin); !models.IsCode(err, models.EForbidden) {
			t.Errorf("a reviewer promoting themselves: %v", err)
		}
		if _, err := e.svc.SetUserRole(ctx, e.admin, e.alice.ID, "root"); !models.IsCode(err, models.EInvalidRequest) {
			t.Errorf("unknown role: %v", err)
		}
		if _, err := e.svc.SetUserRole(ctx, e.admin, e.admin.ID, models.RoleReviewer); !models.IsCode(err, models.EForbidden) {
			t.Errorf("the last admin stepping down: %v", err)
		}
		u, err := e.svc.SetUserRole(ctx, e.admin, e.alice.ID, models.RoleAdmin)
		if err != nil || u.Role != models.RoleAdmin {
			t.Fatalf("promote: %+v, %v", u, err)
		}
		got, err := e.svc.Session(ctx, s.ID, true)
		if err != nil || got.User.Role != models.RoleAdmin {
			t.Fatalf("alice's session after the promotion: %q, %v", got.User.Role, err)
		}
		if _, err := e.svc.ListUsers(ctx, got.User); err != nil {
			t.Errorf("alice as admin lists users: %v", err)
		}

		// Alice demotes root; root's session is a reviewer's, refused.
		rs, err := e.svc.Login(ctx, "acme", "root", adminPW, "192.0.2.1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.SetUserRole(ctx, got.User, e.admin.ID, models.RoleReviewer); err != nil {
			t.Fatal(err)
		}
		root, err := e.svc.Session(ctx, rs.ID, true)
		if err != nil || root.User.Role != models.RoleReviewer {
			t.Fatalf("root's session after the demotion: %q, %v", root.User.Role, err)
		}
		if _, err := e.svc.SetUserRole(ctx, root.User, e.alice.ID, models.RoleReviewer); !models.IsCode(err, models.EForbidden) {
			t.Errorf("demoted root demoting alice: %v", err)
		}
		// Alice is now the last: she may neither step down nor disable
		// herself; stale root, who still claims the role, neither.
		if _, err := e.svc.SetUserRole(ctx, got.User, e.alice.ID, models.RoleReviewer); !models.IsCode(err, models.EForbidden) {
			t.Errorf("the last admin stepping down: %v", err)
		}
		if _, err := e.svc.SetUserDisabled(ctx, e.admin, e.alice.ID, true); !models.IsCode(err, models.EForbidden) {
			t.Errorf("stale root disabling the last admin: %v", err)
		}
		if u, _ := e.st.UserByID(ctx, e.tenant.ID, e.alice.ID); u.Role != models.RoleAdmin || u.Disabled {
			t.Errorf("alice after the refusals: %+v", u)
		}
	})
}
