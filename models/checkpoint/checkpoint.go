// Package checkpoint signs checkpoints of the tenants' audit chains: a JWS
// (typ countersign-audit-checkpoint+jwt) over a chain's head hash and
// length, so that an exported chain can be checked against a signature and
// no entry up to the head can be changed, dropped or reordered unnoticed.
package checkpoint

import (
	"context"
	"encoding/json"
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

// CheckpointAll signs a checkpoint at the head of every chain that grew
// since its last one, and returns how many it stored. Instances racing on
// the same head store one checkpoint: the first wins.
func (c Checkpointer) CheckpointAll(ctx context.Context, now time.Time) (int, error) {
	heads, err := c.Store.UncheckpointedHeads(ctx)
	if err != nil {
		return 0, err
	}
	for _, h := range heads {
		if _, err := c.sign(ctx, h, now); err != nil {
			return 0, err
		}
	}
	return len(heads), nil
}

// CheckpointTenant makes sure the tenant's current head is under a signed
// checkpoint and returns it (ok=false for an empty chain).
func (c Checkpointer) CheckpointTenant(ctx context.Context, tenantID string, now time.Time) (models.Checkpoint, bool, error) {
	h, err := c.Store.Head(ctx, tenantID)
	if err != nil || h.Seq == 0 {
		return models.Checkpoint{}, false, err
	}
	last, ok, err := c.Store.LatestCheckpoint(ctx, tenantID)
	if err != nil {
		return models.Checkpoint{}, false, err
	}
	if ok && last.Seq == h.Seq {
		return last, true, nil
	}
	cp, err := c.sign(ctx, h, now)
	return cp, err == nil, err
}

func (c Checkpointer) sign(ctx context.Context, h store.AuditHead, now time.Time) (models.Checkpoint, error) {
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
