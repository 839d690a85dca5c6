package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// lastUserChange returns the data and actor of the tenant's last audit
// entry, which must be a user change, and how many entries there are.
func lastUserChange(t *testing.T, st *store.Store, tenantID string) (map[string]any, string, int) {
	t.Helper()
	entries, err := st.AuditEntries(context.Background(), tenantID, 0, 1000)
	if err != nil || len(entries) == 0 {
		t.Fatalf("audit entries: %d, %v", len(entries), err)
	}
	last := entries[len(entries)-1]
	if last.Kind != models.AuditUserChanged {
		return nil, "", len(entries)
	}
	b, err := last.Decode()
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(b.Data, &data); err != nil {
		t.Fatal(err)
	}
	return data, b.Actor, len(entries)
}

// activeAdmins names the tenant's users who are administrators and not
// disabled.
func activeAdmins(t *testing.T, st *store.Store, tenantID string) []string {
	t.Helper()
	var names []string
	users, err := st.TenantUsersForTest(context.Background(), tenantID)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		if u.Role == models.RoleAdmin && !u.Disabled {
			names = append(names, u.Name)
		}
	}
	return names
}

// An administrator changes a user's role: the change is logged with the
// role it replaced, a change to the role the user has already logs
// nothing, and the user's live session reads the new role at its next
// request. An unknown role, a reviewer, and another tenant's user are
// refused, and nothing changes.
func TestAdminSetUserRole(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		f := consoleSetup(t, st)
		at := consoleNow.Add(time.Minute)

		u, err := st.AdminSetUserRole(ctx, f.admin, f.reviewer.ID, models.RoleAdmin, at)
		if err != nil || u.Role != models.RoleAdmin || u.ID != f.reviewer.ID {
			t.Fatalf("promote: %+v, %v", u, err)
		}
		data, actor, n := lastUserChange(t, st, f.tenant.ID)
		if actor != f.admin.ID || data["user_id"] != f.reviewer.ID || data["role"] != "admin" || data["previous_role"] != "reviewer" {
			t.Errorf("logged %v by %s", data, actor)
		}
		s, err := st.TouchConsoleSession(ctx, f.reviewerSession.Handle, at, time.Hour, 0, true)
		if err != nil || s.User.Role != models.RoleAdmin {
			t.Fatalf("the promoted user's session: role %q, %v", s.User.Role, err)
		}

		// Unchanged: nothing is logged.
		if u, err = st.AdminSetUserRole(ctx, f.admin, f.reviewer.ID, models.RoleAdmin, at); err != nil || u.Role != models.RoleAdmin {
			t.Fatalf("promote again: %+v, %v", u, err)
		}
		if _, _, again := lastUserChange(t, st, f.tenant.ID); again != n {
			t.Errorf("a change to the same role logged %d entries", again-n)
		}

		// Demoted back, the session stays and is a reviewer's.
		if u, err = st.AdminSetUserRole(ctx, f.admin, f.reviewer.ID, models.RoleReviewer, at); err != nil || u.Role != models.RoleReviewer {
			t.Fatalf("demote: %+v, %v", u, err)
		}
		if data, _, _ := lastUserChange(t, st, f.tenant.ID); data["role"] != "reviewer" || data["previous_role"] != "admin" {
			t.Errorf("demotion logged %v", data)
		}
		s, err = st.TouchConsoleSession(ctx, f.reviewerSession.Handle, at, time.Hour, 0, true)
		if err != nil || s.User.Role != models.RoleReviewer {
			t.Fatalf("the demoted user's session: role %q, %v", s.User.Role, err)
		}
		// As a stale actor (the role its session read before), refused.
		if _, err := st.AdminSetUserRole(ctx, u, f.reviewer.ID, models.RoleAdmin, at); !models.IsCode(err, models.EForbidden) {
			t.Errorf("a reviewer changing a role: %v", err)
		}
		stale := u
		stale.Role = models.RoleAdmin
		if _, err := st.AdminSetUserRole(ctx, stale, f.reviewer.ID, models.RoleAdmin, at); !models.IsCode(err, models.EForbidden) {
			t.Errorf("a demoted admin's stale session changing a role: %v", err)
		}

		if _, err := st.AdminSetUserRole(ctx, f.admin, f.reviewer.ID, "owner", at); !models.IsCode(err, models.EInvalidRequest) {
			t.Errorf("unknown role: %v", err)
		}
		// Another tenant's user is not found, by the admin and by the CLI
		// naming it in this tenant.
		if _, err := st.AdminSetUserRole(ctx, f.admin, f.otherAdmin.ID, models.RoleReviewer, at); !models.IsCode(err, models.ENotFound) {
			t.Errorf("other tenant's user: %v", err)
		}
		if _, err := st.AdminSetUserRole(ctx, f.otherAdmin, f.reviewer.ID, models.RoleAdmin, at); !models.IsCode(err, models.ENotFound) {
			t.Errorf("other tenant's admin on this tenant's user: %v", err)
		}
		if _, err := st.AdminSetUserRole(ctx, f.admin, "usr_nope", models.RoleAdmin, at); !models.IsCode(err, models.ENotFound) {
			t.Errorf("unknown user: %v", err)
		}
		if got, err := st.UserByID(ctx, f.other.ID, f.otherAdmin.ID); err != nil || got.Role != models.RoleAdmin {
			t.Errorf("the other tenant's admin: %+v, %v", got, err)
		}
		if got, _ := st.UserByID(ctx, f.tenant.ID, f.reviewer.ID); got.Role != models.RoleReviewer {
			t.Errorf("a refused change changed alice: %+v", got)
		}

		// The command line names the user and is logged as the system.
		if u, err = st.SetUserRole(ctx, f.tenant.ID, "alice", models.RoleAdmin, at); err != nil || u.Role != models.RoleAdmin {
			t.Fatalf("CLI promote: %+v, %v", u, err)
		}
		if data, actor, _ := lastUserChange(t, st, f.tenant.ID); actor != models.ActorSystem || data["previous_role"] != "reviewer" {
			t.Errorf("CLI change logged %v by %q", data, actor)
		}
		if _, err := st.SetUserRole(ctx, f.tenant.ID, "olga", models.RoleAdmin, at); !models.IsCode(err, models.ENotFound) {
			t.Errorf("CLI unknown name: %v", err)
		}
		if _, err := st.SetUserRole(ctx, f.other.ID, "alice", models.RoleAdmin, at); !models.IsCode(err, models.ENotFound) {
			t.Errorf("CLI name from another tenant: %v", err)
		}
	})
}

// The tenant's last active administrator keeps the role and stays
// enabled, whoever asks: demoting or disabling oneself as the last one, or
// the command line demoting them, is forbidden and changes and logs
// nothing. With another active administrator, the same changes pass. A
// disabled administrator does not count, and changing them is free.
func TestLastActiveAdminStays(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		f := consoleSetup(t, st)
		at := consoleNow.Add(time.Minute)
		_, _, n := lastUserChange(t, st, f.tenant.ID)

		refused := map[string]func() error{
			"self-demotion": func() error {
				_, err := st.AdminSetUserRole(ctx, f.admin, f.admin.ID, models.RoleReviewer, at)
				return err
			},
			"self-disable": func() error {
				_, err := st.AdminSetUserDisabled(ctx, f.admin, f.admin.ID, true, at)
				return err
			},
			"CLI demotion": func() error {
				_, err := st.SetUserRole(ctx, f.tenant.ID, "root", models.RoleReviewer, at)
				return err
			},
		}
		for name, change := range refused {
			if err := change(); !models.IsCode(err, models.EForbidden) {
				t.Errorf("%s of the last admin: %v", name, err)
			}
		}
		if got := activeAdmins(t, st, f.tenant.ID); fmt.Sprint(got) != "[root]" {
			t.Fatalf("active admins %v", got)
		}
		if _, _, again := lastUserChange(t, st, f.tenant.ID); again != n {
			t.Errorf("refused changes logged %d entries", again-n)
		}

		// A disabled administrator is no active one: with only them
		// besides root, root is still the last.
		bob, err := st.AdminCreateUser(ctx, f.admin, "bob", models.RoleAdmin, "h")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.AdminSetUserDisabled(ctx, f.admin, bob.ID, true, at); err != nil {
			t.Fatal(err)
		}
		if _, err := st.AdminSetUserRole(ctx, f.admin, f.admin.ID, models.RoleReviewer, at); !models.IsCode(err, models.EForbidden) {
			t.Errorf("self-demotion beside a disabled admin: %v", err)
		}
		// Disabling the disabled one again, or demoting them, is free.
		if _, err := st.AdminSetUserDisabled(ctx, f.admin, bob.ID, true, at); err != nil {
			t.Errorf("disable a disabled admin: %v", err)
		}
		if _, err := st.AdminSetUserRole(ctx, f.admin, bob.ID, models.RoleReviewer, at); err != nil {
			t.Errorf("demote a disabled admin: %v", err)
		}

		// With alice an active admin, root may step down, and then alice
		// is the last.
		if _, err := st.AdminSetUserRole(ctx, f.admin, f.reviewer.ID, models.RoleAdmin, at); err != nil {
			t.Fatal(err)
		}
		if _, err := st.AdminSetUserRole(ctx, f.admin, f.admin.ID, models.RoleReviewer, at); err != nil {
			t.Fatalf("self-demotion beside another admin: %v", err)
		}
		alice, _ := st.UserByID(ctx, f.tenant.ID, f.reviewer.ID)
		if _, err := st.AdminSetUserDisabled(ctx, alice, alice.ID, true, at); !models.IsCode(err, models.EForbidden) {
			t.Errorf("the new last admin disabling themselves: %v", err)
		}
		if got := activeAdmins(t, st, f.tenant.ID); fmt.Sprint(got) != "[alice]" {
			t.Fatalf("active admins %v", got)
		}
		// Another tenant's last admin is untouched by this tenant's.
		if _, err := st.AdminSetUserRole(ctx, f.otherAdmin, f.otherAdmin.ID, models.RoleReviewer, at); !models.IsCode(err, models.EForbidden) {
			t.Errorf("the other tenant's last admin: %v", err)
		}
	})
}

// Administrators who demote and disable each other and themselves all at
// once, through several store instances (as several servers would) and the
// command line, always leave the tenant an active administrator: each
// round starts with four, 48 goroutines each make one change, and at least
// one administrator is left active, while every change that was refused
// was refused as forbidden. On PostgreSQL, without the tenant's lock two
// administrators demoting each other would each still count the other.
func TestLastActiveAdminUnderConcurrency(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			stores := sharedStores(t, kind, 3, store.Options{})
			st := stores[0]
			tenant, err := st.CreateTenant(ctx, "acme")
			if err != nil {
				t.Fatal(err)
			}
			names := []string{"ann", "ben", "cat", "dan"}
			admins := make([]models.User, len(names))
			for i, name := range names {
				if admins[i], err = st.CreateUser(ctx, tenant.ID, name, models.RoleAdmin, "h"); err != nil {
					t.Fatal(err)
				}
			}
			at := consoleNow
			for round := range 6 {
				// Back to four active admins.
				if err := st.ResetAdminsForTest(ctx, tenant.ID); err != nil {
					t.Fatal(err)
				}
				start := make(chan struct{})
				var wg sync.WaitGroup
				errs := make(chan error, 48)
				for g := range 48 {
					actor, target := admins[g%4], admins[(g/4+round)%4]
					s := stores[g%len(stores)]
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						var err error
						switch g % 3 {
						case 0:
							_, err = s.AdminSetUserRole(ctx, actor, target.ID, models.RoleReviewer, at)
						case 1:
							_, err = s.AdminSetUserDisabled(ctx, actor, target.ID, true, at)
						default:
							_, err = s.SetUserRole(ctx, tenant.ID, target.Name, models.RoleReviewer, at)
						}
						if err != nil && !models.IsCode(err, models.EForbidden) {
							errs <- fmt.Errorf("%s on %s: %w", actor.Name, target.Name, err)
						}
					}()
				}
				close(start)
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
				if got := activeAdmins(t, st, tenant.ID); len(got) == 0 {
					t.Fatalf("round %d: no active administrator is left", round)
				} else if len(got) > 1 {
					t.Logf("round %d: %v left", round, got)
				}
			}
		})
	}
}
