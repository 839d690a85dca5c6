package store

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
)

type signingKeyRow struct {
	KID        string `gorm:"column:kid;primaryKey"`
	PrivateKey string
	PublicKey  string
	Active     bool
	CreatedAt  int64 `gorm:"autoCreateTime:false"`
}

func (signingKeyRow) TableName() string { return "signing_keys" }

// SigningKeys returns every token signing key, newest first (for models/token).
func (s *Store) SigningKeys(ctx context.Context) ([]models.SigningKey, error) {
	var rows []signingKeyRow
	if err := s.db.WithContext(ctx).Order("created_at DESC, kid DESC").Find(&rows).Error; err != nil {
		return nil, dbErr(err)
	}
	out := make([]models.SigningKey, 0, len(rows))
	for _, r := range rows {
		seed, err := s.openKey(column("signing_keys", "private_key"), r.KID, r.PrivateKey)
		if err != nil {
			return nil, err
		}
		if len(seed) != ed25519.SeedSize {
			return nil, fmt.Errorf("signing key %s: bad private key encoding", r.KID)
		}
		priv := ed25519.NewKeyFromSeed(seed)
		out = append(out, models.SigningKey{ID: r.KID, Private: priv, Public: priv.Public().(ed25519.PublicKey),
			CreatedAt: fromMS(r.CreatedAt), Active: r.Active})
	}
	return out, nil
}

// AddKey stores a new signing key and makes it the only active one, in one
// transaction (for models/token). A partial unique index allows one active key
// at most, so two instances rotating at once cannot both win.
func (s *Store) AddKey(ctx context.Context, k models.SigningKey) error {
	if len(k.Private) != ed25519.PrivateKeySize {
		return fmt.Errorf("signing key %s: no private key", k.ID)
	}
	row := signingKeyRow{KID: k.ID, PrivateKey: s.sealKey(column("signing_keys", "private_key"), k.ID, k.Private.Seed()),
		PublicKey: base64.StdEncoding.EncodeToString(k.Public), Active: true, CreatedAt: ms(k.CreatedAt)}
	return s.tx(ctx, func(tx *gorm.DB) error {
		if err := tx.Model(&signingKeyRow{}).Where("active = ?", true).Update("active", false).Error; err != nil {
			return err
		}
		return tx.Create(&row).Error
	})
}
