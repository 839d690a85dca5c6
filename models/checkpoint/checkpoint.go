// Package checkpoint signs checkpoints of the tenants' audit chains: a JWS
// (typ countersign-audit-checkpoint+jwt) over a chain's head hash and
// length, so that an exported chain can be checked against a signature and
// no entry up to the head can be changed, dropped or reordered unnoticed.
package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/token"
)

// Checkpointer signs checkpoints of audit chains.
type Checkpointer struct {
	Store  *store.Store
	Tokens *token.Service
}

// CheckpointAll signs a checkpoint at the head of every chain that moved
// since its last one, and returns how many it stored. Instances racing on
// the same head store one checkpoint: the first wins. A chain that does
// not continue its last checkpoint gets none (ENotProven, joined with the
// other chains' errors); the other chains are still signed.
func (c Checkpointer) CheckpointAll(ctx context.Context, now time.Time) (int, error) {
	return c.CheckpointDue(ctx, now, 0)
}

// CheckpointDue is CheckpointAll for the periodic pass that every instance
// over one database runs: a chain that grew is left to a later pass while
// its newest checkpoint, whichever instance signed it, is younger than
// every. So a chain that keeps growing gets about one checkpoint per
// interval however many instances run the pass, rather than one per
// instance. (Two instances whose passes fall within the same moment may
// still both sign, each at its own head; both checkpoints are valid.) A
// chain that does not continue its newest checkpoint is reported by every
// pass, whatever the checkpoint's age.
func (c Checkpointer) CheckpointDue(ctx context.Context, now time.Time, every time.Duration) (int, error) {
	heads, err := c.Store.UncheckpointedHeads(ctx)
	if err != nil {
		return 0, err
	}
	n, errs := 0, []error{}
	for _, h := range heads {
		if grown := h.Signed > 0 && h.Seq > h.Signed; grown && now.Sub(h.SignedAt) < every {
			if err := c.continues(ctx, h); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if _, err := c.sign(ctx, h, now); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// CheckpointTenant makes sure the tenant's current head is under a signed
// checkpoint and returns it (ok=false for an empty chain that never had
// one).
func (c Checkpointer) CheckpointTenant(ctx context.Context, tenantID string, now time.Time) (models.Checkpoint, bool, error) {
	h, err := c.Store.Head(ctx, tenantID)
	if err != nil {
		return models.Checkpoint{}, false, err
	}
	last, ok, err := c.Store.LatestCheckpoint(ctx, tenantID)
	if err != nil {
		return models.Checkpoint{}, false, err
	}
	switch {
	case ok && last.Seq == h.Seq && last.Hash == h.Hash:
		return last, true, nil
	case h.Seq == 0 && !ok:
		return models.Checkpoint{}, false, nil
	}
	cp, err := c.sign(ctx, h, now)
	return cp, err == nil, err
}

// sign signs a checkpoint at head h once the chain is seen to continue
// the tenant's newest checkpoint. A chain cut back below a signed
// checkpoint, or rewritten up to it, is refused (ENotProven): signing its
// new head would vouch for the cut, and leave out of an export the only
// proof that the lost entries existed.
func (c Checkpointer) sign(ctx context.Context, h store.AuditHead, now time.Time) (models.Checkpoint, error) {
	if err := c.continues(ctx, h); err != nil {
		return models.Checkpoint{}, err
	}
	claims := models.CheckpointClaims{Issuer: c.Tokens.Issuer(), Tenant: h.TenantID, Seq: h.Seq, Count: h.Seq,
		Head: h.Hash, IssuedAt: now.Unix()}
	payload, err := json.Marshal(claims)
	if err != nil {
		return models.Checkpoint{}, models.Wrap(models.EInternal, err, "checkpoint cannot be encoded")
	}
	jws, kid, err := c.Tokens.SignDocument(ctx, token.TypeCheckpoint, payload)
	if err != nil {
		return models.Checkpoint{}, err
	}
	cp := models.Checkpoint{TenantID: h.TenantID, Seq: h.Seq, Hash: h.Hash, KeyID: kid, JWS: jws, CreatedAt: now}
	return cp, c.Store.AddCheckpoint(ctx, cp)
}

// continues reports, with ENotProven, a chain whose head h does not
// continue the tenant's newest checkpoint: the entry that checkpoint
// signed must still be there, with the hash it signed.
func (c Checkpointer) continues(ctx context.Context, h store.AuditHead) error {
	last, ok, err := c.Store.LatestCheckpoint(ctx, h.TenantID)
	if err != nil || !ok {
		return err
	}
	if h.Seq < last.Seq {
		return models.Errorf(models.ENotProven, "the audit chain of tenant %s ends at entry %d, but a checkpoint signed entry %d: "+
			"entries were removed from the database, and no checkpoint is signed over what is left", h.TenantID, h.Seq, last.Seq)
	}
	at, err := c.Store.AuditEntries(ctx, h.TenantID, last.Seq-1, 1)
	if err != nil {
		return err
	}
	if len(at) != 1 || at[0].Seq != last.Seq || at[0].Hash != last.Hash {
		return models.Errorf(models.ENotProven, "entry %d of the audit chain of tenant %s is not the one its signed checkpoint names: "+
			"the chain was rewritten in the database, and no checkpoint is signed over it", last.Seq, h.TenantID)
	}
	return nil
}
