package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

type registryEntry struct {
	Digest         string              `json:"digest"`
	PreviousDigest string              `json:"previous_digest"`
	PolicyVersions map[string]string   `json:"policy_versions"`
	ToolDigests    map[string]string   `json:"tool_digests"`
	ToolChanges    map[string][]string `json:"tool_changes"`
}

func registryEntries(t *testing.T, st *store.Store, tenantID string) []registryEntry {
	t.Helper()
	out, _ := entriesOf[registryEntry](t, st, tenantID, models.AuditRegistryLoaded)
	return out
}

// A chain records the registry a server starts with when it is another
// than the one it last recorded: once, also when several servers start at
// once; the background pass records it only for organizations that have
// none, so servers with two registries during an upgrade do not take
// turns recording theirs.
func TestRegistryChangesAreRecordedOnce(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			stores := sharedStores(t, kind, 3, store.Options{})
			st := stores[0]
			var tenants []string
			for _, name := range []string{"a", "b"} {
				ten, err := st.CreateTenant(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				tenants = append(tenants, ten.ID)
			}
			v1 := store.RegistryRecord{Digest: "sha256:d1", Versions: map[string]string{"refund_order": "r-1", "delete_logs": "l-1"},
				Tools: map[string]string{"refund_order": "sha256:t1", "delete_logs": "sha256:l1"}}
			// v2 changes refund_order, drops delete_logs and adds send_email.
			v2 := store.RegistryRecord{Digest: "sha256:d2", Versions: map[string]string{"refund_order": "r-2", "send_email": "e-1"},
				Tools: map[string]string{"refund_order": "sha256:t2", "send_email": "sha256:e1"}}
			if n, err := st.RecordRegistry(ctx, v1, false); err != nil || n != 2 {
				t.Fatalf("first start: %d (%v)", n, err)
			}
			if n, err := st.RecordRegistry(ctx, v1, false); err != nil || n != 0 {
				t.Fatalf("a start with the same registry: %d (%v)", n, err)
			}
			var wg sync.WaitGroup
			counts := make([]int, len(stores))
			for i, s := range stores {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n, err := s.RecordRegistry(ctx, v2, false)
					if err != nil {
						t.Error(err)
					}
					counts[i] = n
				}()
			}
			wg.Wait()
			if total := counts[0] + counts[1] + counts[2]; total != 2 {
				t.Fatalf("three servers started with a new registry: recorded %v, want 2 in all", counts)
			}
			for _, id := range tenants {
				got := registryEntries(t, st, id)
				if len(got) != 2 || got[0].Digest != "sha256:d1" || got[0].PreviousDigest != "" ||
					got[1].Digest != "sha256:d2" || got[1].PreviousDigest != "sha256:d1" || got[1].PolicyVersions["refund_order"] != "r-2" {
					t.Fatalf("tenant %s: %+v", id, got)
				}
				// The first record names no changes; the second the tools
				// added, removed and changed, with every tool's digest.
				if got[0].ToolChanges != nil || got[1].ToolDigests["refund_order"] != "sha256:t2" ||
					fmt.Sprint(got[1].ToolChanges) != "map[added:[send_email] changed:[refund_order] removed:[delete_logs]]" {
					t.Fatalf("tenant %s: tool changes %v / %v", id, got[0].ToolChanges, got[1].ToolChanges)
				}
			}
			// A server still on d1 during an upgrade: its background pass
			// records nothing; a new organization gets its registry.
			if n, err := st.RecordRegistry(ctx, v1, true); err != nil || n != 0 {
				t.Fatalf("background pass with the old registry: %d (%v)", n, err)
			}
			c, err := st.CreateTenant(ctx, "c")
			if err != nil {
				t.Fatal(err)
			}
			if n, err := st.RecordRegistry(ctx, store.RegistryRecord{Digest: "sha256:d2"}, true); err != nil || n != 1 {
				t.Fatalf("background pass after a new organization: %d (%v)", n, err)
			}
			if got := registryEntries(t, st, c.ID); len(got) != 1 || got[0].Digest != "sha256:d2" {
				t.Fatalf("new organization: %+v", got)
			}
		})
	}
}
