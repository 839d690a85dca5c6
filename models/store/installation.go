package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
)

type installationRow struct {
	Singleton int `gorm:"primaryKey"`
	ID        string
	CreatedAt int64 `gorm:"autoCreateTime:false"`
}

func (installationRow) TableName() string { return "installation" }

// Installation returns this installation's id, creating it on first use. The
// id is 128 random bits; the first instance to start writes it (the
// single-row table's primary key decides) and every instance reads the same
// value afterwards. It is part of every downstream idempotency key
// (models.DownstreamKey).
func (s *Store) Installation(ctx context.Context) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", models.Wrap(models.EInternal, err, "cannot draw an installation id")
	}
	row := installationRow{Singleton: 1, ID: "ins_" + hex.EncodeToString(b[:]), CreatedAt: ms(s.clock.Now())}
	var id string
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if _, err := insertOnce(tx, &row); err != nil {
			return err
		}
		var got installationRow
		if err := tx.Where("singleton = 1").Take(&got).Error; err != nil {
			return err
		}
		id = got.ID
		return nil
	})
	return id, err
}
