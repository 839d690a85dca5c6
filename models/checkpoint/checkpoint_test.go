package checkpoint_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/checkpoint"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/token"
)

// TestCheckpoints: instances racing sign one checkpoint per head, which
// verifies under the token keys with its own type; an unchanged chain gets
// no new one.
func TestCheckpoints(t *testing.T) {
	ctx := context.Background()
	url := "sqlite://" + filepath.Join(t.TempDir(), "c.db")
	var cps []checkpoint.Checkpointer
	var tokens *token.Service
	for i := 0; i < 3; i++ {
		st, err := store.Open(url, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if _, err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		tokens = token.New(st, token.Config{Issuer: "countersign"})
		if err := tokens.EnsureKey(ctx); err != nil {
			t.Fatal(err)
		}
		cps = append(cps, checkpoint.Checkpointer{Store: st, Tokens: tokens})
	}
	st := cps[0].Store
	ten, err := st.CreateTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := st.Audit(ctx, ten.ID, time.Now(), models.AuditEvent{Kind: models.AuditSignIn, Actor: "usr_x"}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, c := range cps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.CheckpointAll(ctx, time.Now()); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	// The chain: the signing key, recorded at the tenant's creation, and
	// the three sign-ins.
	got, err := st.Checkpoints(ctx, ten.ID, 0)
	if err != nil || len(got) != 1 || got[0].Seq != 4 {
		t.Fatalf("checkpoints %+v (%v), want one at 4", got, err)
	}
	head, _ := st.Head(ctx, ten.ID)
	payload, _, err := tokens.VerifyDocument(ctx, token.TypeCheckpoint, got[0].JWS)
	if err != nil {
		t.Fatal(err)
	}
	var c models.CheckpointClaims
	if err := json.Unmarshal(payload, &c); err != nil || c.Head != head.Hash || c.Count != 4 || c.Tenant != ten.ID {
		t.Fatalf("claims %+v (%v), head %s", c, err, head.Hash)
	}
	if _, _, err := tokens.VerifyDocument(ctx, token.TypeReceipt, got[0].JWS); !models.IsCode(err, models.EInvalidSignature) {
		t.Fatalf("a checkpoint passed as a receipt: %v", err)
	}
	if n, err := cps[1].CheckpointAll(ctx, time.Now()); err != nil || n != 0 {
		t.Fatalf("unchanged chain: %d new checkpoints (%v)", n, err)
	}
}
