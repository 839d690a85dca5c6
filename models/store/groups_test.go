package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// Groups belong to one tenant and are changed by its administrators (or
// the command line); reviewers, other tenants' administrators and bad
// names are refused.
func TestReviewerGroupsAdmin(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx, now := context.Background(), time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)
		d := seed(t, st)
		tenant := d.Tenant.ID
		admin := store.GroupActor{TenantID: tenant, Admin: &d.Admin}
		if _, err := st.CreateGroup(ctx, admin, "finance", now); err != nil {
			t.Fatal(err)
		}
		_, err := st.CreateGroup(ctx, admin, "finance", now)
		wantStoreCode(t, err, models.EAlreadyExists)
		_, err = st.CreateGroup(ctx, admin, "Finance Team", now)
		wantStoreCode(t, err, models.EInvalidRequest)
		_, err = st.CreateGroup(ctx, store.GroupActor{TenantID: tenant, Admin: &d.Reviewer}, "security", now)
		wantStoreCode(t, err, models.EForbidden)

		if _, err := st.SetGroupMember(ctx, admin, "finance", "alice", true, now); err != nil {
			t.Fatal(err)
		}
		if _, err := st.SetGroupMember(ctx, admin, "finance", "alice", true, now); err != nil {
			t.Fatalf("adding a member twice: %v", err)
		}
		_, err = st.SetGroupMember(ctx, admin, "finance", "nobody", true, now)
		wantStoreCode(t, err, models.ENotFound)
		_, err = st.SetGroupMember(ctx, admin, "nogroup", "alice", true, now)
		wantStoreCode(t, err, models.ENotFound)

		other, err := st.CreateTenant(ctx, "other")
		if err != nil {
			t.Fatal(err)
		}
		olga, err := st.CreateUser(ctx, other.ID, "olga", models.RoleAdmin, "x")
		if err != nil {
			t.Fatal(err)
		}
		// Another tenant's administrator acting on this tenant is refused;
		// in their own tenant the group and the user do not exist.
		_, err = st.SetGroupMember(ctx, store.GroupActor{TenantID: tenant, Admin: &olga}, "finance", "alice", false, now)
		wantStoreCode(t, err, models.EForbidden)
		_, err = st.SetGroupMember(ctx, store.GroupActor{TenantID: other.ID, Admin: &olga}, "finance", "alice", true, now)
		wantStoreCode(t, err, models.ENotFound)

		groups, err := st.ListGroups(ctx, tenant)
		if err != nil {
			t.Fatal(err)
		}
		if len(groups) != 1 || groups[0].Name != "finance" || len(groups[0].Members) != 1 || groups[0].Members[0].UserName != "alice" {
			t.Fatalf("groups %+v", groups)
		}
		if g, _ := st.ListGroups(ctx, other.ID); len(g) != 0 {
			t.Fatalf("other tenant sees %+v", g)
		}
		of, err := st.GroupsOf(ctx, tenant, []string{d.Reviewer.ID, d.Admin.ID})
		if err != nil || len(of[d.Reviewer.ID]) != 1 || len(of[d.Admin.ID]) != 0 {
			t.Fatalf("groups of: %v %v", of, err)
		}
		if _, err := st.SetGroupMember(ctx, admin, "finance", "alice", false, now); err != nil {
			t.Fatal(err)
		}
		if groups, _ = st.ListGroups(ctx, tenant); len(groups[0].Members) != 0 {
			t.Fatalf("after removal %+v", groups)
		}
		// Each change (not the no-op second add) left one audit entry.
		entries, err := st.AuditEntries(ctx, tenant, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range entries {
			if e.Kind == models.AuditGroupChanged {
				n++
			}
		}
		if n != 3 {
			t.Fatalf("%d group audit entries, want 3 (created, added, removed)", n)
		}
	})
}

// After migration 00015 the status column accepts superseded and still
// refuses what is no state.
func TestStatusConstraintAcceptsSuperseded(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		d := seed(t, st)
		insert := func(id, status string) error {
			return st.Exec(ctx, `INSERT INTO proposals (id, tenant_id, agent_id, tool, arguments, args_digest, preview, risk_tier,
				confirmation, quorum, ttl_ms, policy_version, request_key, status, created_at, expires_at, updated_at)
				VALUES (?, ?, ?, 'refund_order', '{}', 'sha256:d', '[]', 'low', 'click', 1, 1000, 'p1', ?, ?, 1, 2, 3)`,
				id, d.Tenant.ID, d.Agent.ID, "k-"+id, status)
		}
		if err := insert("prop_s", "superseded"); err != nil {
			t.Fatal(err)
		}
		if err := insert("prop_x", "bogus"); err == nil {
			t.Fatal("the status constraint accepted a value that is no state")
		}
	})
}

func wantStoreCode(t *testing.T, err error, want models.Code) {
	t.Helper()
	if got := models.ErrorCode(err); got != want {
		t.Fatalf("error %q (%v), want %q", got, err, want)
	}
}
