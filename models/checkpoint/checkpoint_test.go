package checkpoint_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
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

// An insider who removes the newest entries of a chain from the database
// (the append-only trigger dropped first), or rewrites one, gets no
// checkpoint signed over what is left: the chain no longer continues its
// newest checkpoint, whose entry was the only proof the removed ones
// existed. The background pass still signs the other tenants' chains.
func TestNoCheckpointOverACutChain(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open("sqlite://"+filepath.Join(t.TempDir(), "c.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	tokens := token.New(st, token.Config{Issuer: "countersign"})
	if err := tokens.EnsureKey(ctx); err != nil {
		t.Fatal(err)
	}
	c := checkpoint.Checkpointer{Store: st, Tokens: tokens}
	audit := func(tenant string, n int) {
		for range n {
			if err := st.Audit(ctx, tenant, time.Now(), models.AuditEvent{Kind: models.AuditSignIn, Actor: "usr_x"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	cut, err := st.CreateTenant(ctx, "cut")
	if err != nil {
		t.Fatal(err)
	}
	rewritten, _ := st.CreateTenant(ctx, "rewritten")
	honest, _ := st.CreateTenant(ctx, "honest")
	audit(cut.ID, 4)
	audit(rewritten.ID, 2)
	if _, err := c.CheckpointAll(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if err := st.Gorm().Exec(q, args...).Error; err != nil {
			t.Fatal(err)
		}
	}
	exec(`DROP TRIGGER audit_entries_no_DELETE`)
	exec(`DROP TRIGGER audit_entries_no_UPDATE`)
	exec(`DELETE FROM audit_entries WHERE tenant_id = ? AND seq > 2`, cut.ID)
	exec(`UPDATE audit_entries SET hash = 'sha256:00' WHERE tenant_id = ? AND seq = 3`, rewritten.ID)
	audit(honest.ID, 1)

	n, err := c.CheckpointAll(ctx, time.Now())
	if !models.IsCode(err, models.ENotProven) || n != 1 {
		t.Fatalf("background pass over a cut chain: %d signed, %v", n, err)
	}
	if cps, _ := st.Checkpoints(ctx, cut.ID, 0); len(cps) != 1 || cps[0].Seq != 5 {
		t.Errorf("the cut chain's checkpoints: %+v", cps)
	}
	if cps, _ := st.Checkpoints(ctx, honest.ID, 0); len(cps) != 2 {
		t.Errorf("the honest chain was not signed: %+v", cps)
	}
	// The newest entry rewritten with nothing appended since: the
	// background pass sees it too.
	head, _ := st.Head(ctx, honest.ID)
	exec(`UPDATE audit_entries SET hash = 'sha256:11' WHERE tenant_id = ? AND seq = ?`, honest.ID, head.Seq)
	if _, err := c.CheckpointAll(ctx, time.Now()); !models.IsCode(err, models.ENotProven) || !strings.Contains(err.Error(), honest.ID) {
		t.Errorf("a rewritten head under its checkpoint: %v", err)
	}
	for _, ten := range []models.Tenant{cut, rewritten} {
		if _, _, err := c.CheckpointTenant(ctx, ten.ID, time.Now()); !models.IsCode(err, models.ENotProven) {
			t.Errorf("%s: checkpoint for an export: %v", ten.Name, err)
		}
	}
	// Entries written after the cut do not hide it either.
	audit(cut.ID, 5)
	if _, err := c.CheckpointAll(ctx, time.Now()); !models.IsCode(err, models.ENotProven) {
		t.Errorf("after the chain grew past the cut: %v", err)
	}
}

// Three instances over one database each run the minute's pass while the
// chain keeps growing: the chain gets one checkpoint per interval, not one
// per instance, and the instance whose turn it is signs even when another
// signed the last one. A chain cut below its newest checkpoint is still
// reported by every pass within the interval.
func TestOneCheckpointPerIntervalAcrossInstances(t *testing.T) {
	ctx := context.Background()
	url := "sqlite://" + filepath.Join(t.TempDir(), "c.db")
	var cps []checkpoint.Checkpointer
	for range 3 {
		st, err := store.Open(url, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if _, err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		tokens := token.New(st, token.Config{Issuer: "countersign"})
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
	grow := func() {
		t.Helper()
		if err := st.Audit(ctx, ten.ID, time.Now(), models.AuditEvent{Kind: models.AuditSignIn, Actor: "usr_x"}); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int {
		t.Helper()
		got, err := st.Checkpoints(ctx, ten.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		return len(got)
	}
	const every = time.Minute
	t0 := time.Now().Truncate(time.Second)
	// Each minute, the instances' passes a second apart, the chain
	// growing before each.
	for minute := range 3 {
		for i, c := range cps {
			grow()
			at := t0.Add(time.Duration(minute)*every + time.Duration(i)*time.Second)
			if _, err := c.CheckpointDue(ctx, at, every); err != nil {
				t.Fatal(err)
			}
		}
		if n := count(); n != minute+1 {
			t.Fatalf("after minute %d: %d checkpoints, want %d (one per minute, not one per instance)", minute, n, minute+1)
		}
	}
	// The instance that signed is gone; the next one signs once the
	// newest checkpoint is a minute old.
	grow()
	if _, err := cps[1].CheckpointDue(ctx, t0.Add(3*every-time.Millisecond), every); err != nil || count() != 3 {
		t.Fatalf("a pass inside the minute signed: %d checkpoints (%v)", count(), err)
	}
	if _, err := cps[1].CheckpointDue(ctx, t0.Add(3*every+time.Second), every); err != nil || count() != 4 {
		t.Fatalf("the minute's pass of another instance: %d checkpoints (%v), want 4", count(), err)
	}
	// A cut below the newest checkpoint, the chain grown past it again:
	// reported within the minute, and nothing signed.
	exec := func(q string, args ...any) {
		t.Helper()
		if err := st.Gorm().Exec(q, args...).Error; err != nil {
			t.Fatal(err)
		}
	}
	exec(`DROP TRIGGER audit_entries_no_DELETE`)
	head, _ := st.Head(ctx, ten.ID)
	exec(`DELETE FROM audit_entries WHERE tenant_id = ? AND seq >= ?`, ten.ID, head.Seq-1)
	for range 4 {
		grow()
	}
	if _, err := cps[2].CheckpointDue(ctx, t0.Add(3*every+2*time.Second), every); !models.IsCode(err, models.ENotProven) || count() != 4 {
		t.Fatalf("a cut chain within the minute: %v, %d checkpoints", err, count())
	}
}
