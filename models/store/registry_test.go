package store_test

import (
	"context"
	"sync"
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

type registryEntry struct {
	Digest         string            `json:"digest"`
	PreviousDigest string            `json:"previous_digest"`
	PolicyVersions map[string]string `json:"policy_versions"`
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
			v1 := map[string]string{"refund_order": "r-1"}
			if n, err := st.RecordRegistry(ctx, "sha256:d1", v1, false); err != nil || n != 2 {
				t.Fatalf("first start: %d (%v)", n, err)
			}
			if n, err := st.RecordRegistry(ctx, "sha256:d1", v1, false); err != nil || n != 0 {
				t.Fatalf("a start with the same registry: %d (%v)", n, err)
			}
			var wg sync.WaitGroup
			counts := make([]int, len(stores))
			for i, s := range stores {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n, err := s.RecordRegistry(ctx, "sha256:d2", map[string]string{"refund_order": "r-2"}, false)
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
			}
			// A server still on d1 during an upgrade: its background pass
			// records nothing; a new organization gets its registry.
			if n, err := st.RecordRegistry(ctx, "sha256:d1", v1, true); err != nil || n != 0 {
				t.Fatalf("background pass with the old registry: %d (%v)", n, err)
			}
			c, err := st.CreateTenant(ctx, "c")
			if err != nil {
				t.Fatal(err)
			}
			if n, err := st.RecordRegistry(ctx, "sha256:d2", nil, true); err != nil || n != 1 {
				t.Fatalf("background pass after a new organization: %d (%v)", n, err)
			}
			if got := registryEntries(t, st, c.ID); len(got) != 1 || got[0].Digest != "sha256:d2" {
				t.Fatalf("new organization: %+v", got)
			}
		})
	}
}
