package store

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

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
// at most; concurrent additions take turns (lockSigningKeys), so each
// replaces the one before it. The same transaction records the key in every
// tenant's audit chain (models.AuditSigningKeyAdded), so that an offline
// verifier can tell which keys signed for an organization and since when.
func (s *Store) AddKey(ctx context.Context, k models.SigningKey) error {
	if len(k.Private) != ed25519.PrivateKeySize {
		return fmt.Errorf("signing key %s: no private key", k.ID)
	}
	row := signingKeyRow{KID: k.ID, PrivateKey: s.sealKey(column("signing_keys", "private_key"), k.ID, k.Private.Seed()),
		PublicKey: base64.StdEncoding.EncodeToString(k.Public), Active: true, CreatedAt: ms(k.CreatedAt)}
	return s.tx(ctx, func(tx *gorm.DB) error {
		if err := lockSigningKeys(tx); err != nil {
			return err
		}
		// Keys from before are recorded first, so that a chain never
		// records a key late after one it recorded as it was added.
		if _, err := backfillKeys(tx, k.CreatedAt); err != nil {
			return err
		}
		var previous []string
		if err := tx.Model(&signingKeyRow{}).Where("active = ?", true).Pluck("kid", &previous).Error; err != nil {
			return err
		}
		if err := tx.Model(&signingKeyRow{}).Where("active = ?", true).Update("active", false).Error; err != nil {
			return err
		}
		if err := tx.Create(&row).Error; err != nil {
			return err
		}
		var tenants []string
		if err := tx.Model(&tenantRow{}).Order("id").Pluck("id", &tenants).Error; err != nil {
			return err
		}
		for _, t := range tenants {
			if err := recordKey(tx, t, row, strings.Join(previous, ","), false, k.CreatedAt); err != nil {
				return err
			}
		}
		return nil
	})
}

// RecordSigningKeys records in each tenant's audit chain the signing keys
// it does not record yet: keys added before countersign recorded them (the
// entries say backfilled). The server runs it at start; it is idempotent
// and safe to run from several instances at once.
func (s *Store) RecordSigningKeys(ctx context.Context) (int, error) {
	n := 0
	err := s.tx(ctx, func(tx *gorm.DB) (err error) {
		if err := lockSigningKeys(tx); err != nil {
			return err
		}
		n, err = backfillKeys(tx, s.clock.Now())
		return err
	})
	return n, err
}

// backfillKeys records, marked backfilled, the signing keys that tenants'
// chains do not record, oldest first; the caller holds lockSigningKeys.
func backfillKeys(tx *gorm.DB, now time.Time) (int, error) {
	var missing []struct {
		TenantID string
		KID      string `gorm:"column:kid"`
	}
	err := tx.Raw(`SELECT t.id AS tenant_id, k.kid AS kid FROM tenants t CROSS JOIN signing_keys k
		WHERE NOT EXISTS (SELECT 1 FROM signing_key_records r WHERE r.tenant_id = t.id AND r.kid = k.kid)
		ORDER BY t.id, k.created_at, k.kid`).Scan(&missing).Error
	if err != nil || len(missing) == 0 {
		return 0, err
	}
	var rows []signingKeyRow
	if err := tx.Select("kid", "public_key", "active", "created_at").Find(&rows).Error; err != nil {
		return 0, err
	}
	byKID := map[string]signingKeyRow{}
	for _, r := range rows {
		byKID[r.KID] = r
	}
	for _, m := range missing {
		if err := recordKey(tx, m.TenantID, byKID[m.KID], "", true, now); err != nil {
			return 0, err
		}
	}
	return len(missing), nil
}

// recordSigningKeys begins a new tenant's chain with the signing keys that
// exist, oldest first, inside the transaction that creates the tenant.
func recordSigningKeys(tx *gorm.DB, tenantID string, at time.Time) error {
	if err := lockSigningKeys(tx); err != nil {
		return err
	}
	var rows []signingKeyRow
	if err := tx.Select("kid", "public_key", "active", "created_at").Order("created_at, kid").Find(&rows).Error; err != nil {
		return err
	}
	for _, r := range rows {
		if err := recordKey(tx, tenantID, r, "", false, at); err != nil {
			return err
		}
	}
	return nil
}

type signingKeyRecordRow struct {
	TenantID   string `gorm:"primaryKey"`
	KID        string `gorm:"column:kid;primaryKey"`
	RecordedAt int64
}

func (signingKeyRecordRow) TableName() string { return "signing_key_records" }

// recordKey appends r's signing_key.added entry to the tenant's chain
// unless the chain records r already. previous is the key r replaced as
// the active one ("" for none or not known); backfilled marks a key
// recorded after it was added.
func recordKey(tx *gorm.DB, tenantID string, r signingKeyRow, previous string, backfilled bool, at time.Time) error {
	fresh, err := insertOnce(tx, &signingKeyRecordRow{TenantID: tenantID, KID: r.KID, RecordedAt: ms(at)})
	if err != nil || !fresh {
		return err
	}
	pub, err := base64.StdEncoding.DecodeString(r.PublicKey)
	if err != nil {
		return fmt.Errorf("signing key %s: bad public key encoding", r.KID)
	}
	data := map[string]any{"kid": r.KID, "alg": "EdDSA", "public_key": base64.RawURLEncoding.EncodeToString(pub),
		"created_at": fromMS(r.CreatedAt).UTC().Format(time.RFC3339Nano), "active": r.Active, "previous_kid": previous}
	if backfilled {
		data["backfilled"] = true
	}
	return appendAudit(tx, tenantID, at, adminEvent(models.AuditSigningKeyAdded, models.ActorSystem, data))
}

// signingKeysLock is the PostgreSQL advisory lock that orders the addition
// of signing keys, their recording and the creation of tenants: a tenant
// created while a key is added either sees the key when it records the
// keys, or is seen by the addition. (SQLite has one writer and needs none.)
const signingKeysLock = 0x63730002

func lockSigningKeys(tx *gorm.DB) error {
	if tx.Dialector.Name() != "postgres" {
		return nil
	}
	return tx.Exec("SELECT pg_advisory_xact_lock(" + strconv.Itoa(signingKeysLock) + ", 0)").Error
}
