package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
)

// Security keys (WebAuthn credentials) and the server-side state of WebAuthn
// ceremonies. Binary values are stored as base64url text (b64), so that one
// schema serves both databases.

var b64 = base64.RawURLEncoding

type securityKeyRow struct {
	ID                 string `gorm:"primaryKey"`
	TenantID           string
	UserID             string
	CredentialID       string
	Name               string
	PublicKey          string
	PublicKeyAlgorithm int64
	AttestationType    string
	AttestationFormat  string
	AAGUID             string `gorm:"column:aaguid"`
	SignCount          int64
	Flags              int
	UserPresent        bool
	UserVerified       bool
	BackupEligible     bool
	BackupState        bool
	Transports         string
	Attachment         string
	Attestation        string
	Extensions         string
	CreatedAt          int64 `gorm:"autoCreateTime:false"`
	LastUsedAt         *int64
	FlaggedAt          *int64
	RemovedAt          *int64
}

func (securityKeyRow) TableName() string { return "webauthn_credentials" }

func (r securityKeyRow) model() (models.SecurityKey, error) {
	k := models.SecurityKey{ID: r.ID, TenantID: r.TenantID, UserID: r.UserID, Name: r.Name,
		PublicKeyAlgorithm: r.PublicKeyAlgorithm, AttestationType: r.AttestationType,
		AttestationFormat: r.AttestationFormat, SignCount: uint32(r.SignCount),
		Flags: models.KeyFlags{UserPresent: r.UserPresent, UserVerified: r.UserVerified,
			BackupEligible: r.BackupEligible, BackupState: r.BackupState, Raw: byte(r.Flags)},
		Attachment: r.Attachment, CreatedAt: fromMS(r.CreatedAt), LastUsedAt: fromMSPtr(r.LastUsedAt),
		FlaggedAt: fromMSPtr(r.FlaggedAt), RemovedAt: fromMSPtr(r.RemovedAt)}
	var err1, err2, err3, err4 error
	k.CredentialID, err1 = b64.DecodeString(r.CredentialID)
	k.PublicKey, err2 = b64.DecodeString(r.PublicKey)
	k.AAGUID, err3 = b64.DecodeString(r.AAGUID)
	err4 = json.Unmarshal([]byte(r.Transports), &k.Transports)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return models.SecurityKey{}, fmt.Errorf("security key %s: %w", r.ID, err)
	}
	if r.Attestation != "" {
		k.Attestation = json.RawMessage(r.Attestation)
	}
	if r.Extensions != "" {
		k.Extensions = json.RawMessage(r.Extensions)
	}
	return k, nil
}

func keyRows(rows []securityKeyRow) ([]models.SecurityKey, error) {
	out := make([]models.SecurityKey, 0, len(rows))
	for _, r := range rows {
		k, err := r.model()
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, nil
}

// CreateSecurityKey stores a newly registered key and returns it as stored.
// k.ID is assigned when empty. EAlreadyExists when the credential id is
// registered already (to anyone: credential ids are unique).
func (s *Store) CreateSecurityKey(ctx context.Context, k models.SecurityKey) (models.SecurityKey, error) {
	return s.CreateSecurityKeyIfNoneSince(ctx, k, time.Time{})
}

// CreateSecurityKeyIfNoneSince stores a new key unless the user registered
// another one after since (the moment the registration ceremony
// began): a registration that started while the user had no key, and so
// needed no proof of possession, must not finish once a key exists. The
// user's row is locked first (a row lock on PostgreSQL, the single writer
// on SQLite), so two finishes cannot both see no key. A zero since checks
// nothing. Errors as CreateSecurityKey, plus EStepUpFailed.
func (s *Store) CreateSecurityKeyIfNoneSince(ctx context.Context, k models.SecurityKey, since time.Time) (models.SecurityKey, error) {
	if k.ID == "" {
		k.ID = models.NewID("key")
	}
	transports := k.Transports
	if transports == nil {
		transports = []string{}
	}
	tj, err := json.Marshal(transports)
	if err != nil {
		return models.SecurityKey{}, err
	}
	row := securityKeyRow{ID: k.ID, TenantID: k.TenantID, UserID: k.UserID, CredentialID: b64.EncodeToString(k.CredentialID),
		Name: k.Name, PublicKey: b64.EncodeToString(k.PublicKey), PublicKeyAlgorithm: k.PublicKeyAlgorithm,
		AttestationType: k.AttestationType, AttestationFormat: k.AttestationFormat, AAGUID: b64.EncodeToString(k.AAGUID),
		SignCount: int64(k.SignCount), Flags: int(k.Flags.Raw), UserPresent: k.Flags.UserPresent,
		UserVerified: k.Flags.UserVerified, BackupEligible: k.Flags.BackupEligible, BackupState: k.Flags.BackupState,
		Transports: string(tj), Attachment: k.Attachment, Attestation: string(k.Attestation),
		Extensions: string(k.Extensions), CreatedAt: ms(k.CreatedAt)}
	err = s.tx(ctx, func(tx *gorm.DB) error {
		if !since.IsZero() {
			if err := tx.Model(&userRow{}).Where("tenant_id = ? AND id = ?", k.TenantID, k.UserID).
				Update("id", gorm.Expr("id")).Error; err != nil {
				return err
			}
			var n int64
			if err := tx.Model(&securityKeyRow{}).
				Where("tenant_id = ? AND user_id = ? AND removed_at IS NULL AND created_at > ?", k.TenantID, k.UserID, ms(since)).
				Count(&n).Error; err != nil {
				return err
			}
			if n > 0 {
				return models.Errorf(models.EStepUpFailed,
					"another security key was registered to you while this registration was open; start again and confirm with that key")
			}
		}
		ok, err := insertOnce(tx, &row)
		if err != nil {
			return err
		}
		if !ok {
			return models.Errorf(models.EAlreadyExists, "this security key is registered already")
		}
		return appendAudit(tx, k.TenantID, k.CreatedAt, adminEvent(models.AuditKeyRegistered, k.UserID, map[string]any{
			"user_id": k.UserID, "key_id": k.ID, "name": k.Name, "credential_id": row.CredentialID, "public_key": row.PublicKey}))
	})
	if err != nil {
		return models.SecurityKey{}, err
	}
	return row.model()
}

// SecurityKeys returns the user's keys that were not removed, oldest first;
// flagged keys are included. EUnavailable on database errors.
func (s *Store) SecurityKeys(ctx context.Context, tenantID, userID string) ([]models.SecurityKey, error) {
	var rows []securityKeyRow
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND user_id = ? AND removed_at IS NULL", tenantID, userID).
		Order("created_at, id").Find(&rows).Error
	if err != nil {
		return nil, dbErr(err)
	}
	return keyRows(rows)
}

// SecurityKey returns one key of the user that was not removed, or
// ENotFound.
func (s *Store) SecurityKey(ctx context.Context, tenantID, userID, keyID string) (models.SecurityKey, error) {
	var row securityKeyRow
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND user_id = ? AND id = ? AND removed_at IS NULL",
		tenantID, userID, keyID).Take(&row).Error
	if err != nil {
		return models.SecurityKey{}, notFound(err, "no such security key")
	}
	return row.model()
}

// SecurityKeyByCredentialID returns the tenant's key with that credential
// id, removed or not, or ENotFound. The history and the evidence check use
// it to name the key an approval was signed with.
func (s *Store) SecurityKeyByCredentialID(ctx context.Context, tenantID string, credentialID []byte) (models.SecurityKey, error) {
	var row securityKeyRow
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND credential_id = ?", tenantID, b64.EncodeToString(credentialID)).
		Take(&row).Error
	if err != nil {
		return models.SecurityKey{}, notFound(err, "no such security key")
	}
	return row.model()
}

// RenameSecurityKey renames one of the user's keys. ENotFound for keys that
// are not the user's or were removed.
func (s *Store) RenameSecurityKey(ctx context.Context, tenantID, userID, keyID, name string) (models.SecurityKey, error) {
	var row securityKeyRow
	err := s.tx(ctx, func(tx *gorm.DB) error {
		res := tx.Model(&securityKeyRow{}).
			Where("tenant_id = ? AND user_id = ? AND id = ? AND removed_at IS NULL", tenantID, userID, keyID).
			Update("name", name)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return models.Errorf(models.ENotFound, "no such security key")
		}
		return tx.Where("id = ?", keyID).Take(&row).Error
	})
	if err != nil {
		return models.SecurityKey{}, err
	}
	return row.model()
}

// RemoveSecurityKey marks one of the user's keys removed: it approves
// nothing any more, and the history still names it. The sessions the key
// began end with it, in the same transaction, but the one whose handle is
// from (the session the removal was confirmed in; none when ""). ENotFound
// for keys that are not the user's or were removed already.
func (s *Store) RemoveSecurityKey(ctx context.Context, tenantID, userID, keyID, from string, now time.Time) error {
	return s.tx(ctx, func(tx *gorm.DB) error {
		res := tx.Model(&securityKeyRow{}).
			Where("tenant_id = ? AND user_id = ? AND id = ? AND removed_at IS NULL", tenantID, userID, keyID).
			Update("removed_at", ms(now))
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return models.Errorf(models.ENotFound, "no such security key")
		}
		ended, err := revokeKeySessions(tx, tenantID, userID, keyID, from, now)
		if err != nil {
			return err
		}
		return appendAudit(tx, tenantID, now, adminEvent(models.AuditKeyRemoved, userID,
			map[string]any{"user_id": userID, "key_id": keyID, "sessions_ended": ended}))
	})
}

// SessionKey returns the key, removed or not, that began a session of the
// user, for the session's checks; ENotFound when there is none.
func (s *Store) SessionKey(ctx context.Context, tenantID, userID, keyID string) (models.SecurityKey, error) {
	var row securityKeyRow
	err := s.read.WithContext(ctx).Where("tenant_id = ? AND user_id = ? AND id = ?", tenantID, userID, keyID).Take(&row).Error
	if err != nil {
		return models.SecurityKey{}, notFound(err, "no such security key")
	}
	return row.model()
}

// RecordKeyUse records a verified assertion of one of the user's keys: the
// signature counter advances to use.SignCount, the flags and the last-used
// time are updated. It is one conditional UPDATE that refuses a counter that
// does not move forward (WebAuthn §7.2 step 22; a counter of 0 both stored
// and presented means the authenticator keeps none). A counter that went
// backwards or stood still flags the key as a possible clone — the flag is
// committed — and the use is refused, as is any later use of a flagged key.
//
// Errors: EStepUpFailed (counter regression, or a flagged key), ENotFound
// (not the user's key, or removed), EUnavailable.
func (s *Store) RecordKeyUse(ctx context.Context, tenantID, userID, keyID string, use models.KeyUse, now time.Time) (models.SecurityKey, error) {
	var (
		row       securityKeyRow
		refusal   error
		newCount  = int64(use.SignCount)
		condition = "tenant_id = ? AND user_id = ? AND id = ? AND removed_at IS NULL AND flagged_at IS NULL" +
			" AND (sign_count < ? OR (sign_count = 0 AND ? = 0))"
	)
	err := s.tx(ctx, func(tx *gorm.DB) error {
		res := tx.Model(&securityKeyRow{}).Where(condition, tenantID, userID, keyID, newCount, newCount).
			Updates(map[string]any{
				"sign_count": newCount, "flags": int(use.Flags.Raw), "user_present": use.Flags.UserPresent,
				"backup_state": use.Flags.BackupState, "last_used_at": ms(now),
			})
		if res.Error != nil {
			return res.Error
		}
		if err := tx.Where("tenant_id = ? AND user_id = ? AND id = ?", tenantID, userID, keyID).Take(&row).Error; err != nil {
			return notFound(err, "this security key is not registered to you")
		}
		if res.RowsAffected == 1 {
			return nil
		}
		switch {
		case row.RemovedAt != nil:
			return models.Errorf(models.ENotFound, "this security key was removed")
		case row.FlaggedAt != nil:
			refusal = flaggedError(fromMS(*row.FlaggedAt))
			return nil
		}
		// The counter went backwards or stood still: flag the key, and
		// keep the flag although the use is refused.
		flag := tx.Model(&securityKeyRow{}).Where("id = ? AND flagged_at IS NULL", keyID).Update("flagged_at", ms(now))
		if flag.Error != nil {
			return flag.Error
		}
		if flag.RowsAffected == 1 {
			// Whoever holds a copy may have signed in with it: every
			// session the key began ends with the flag.
			ended, err := revokeKeySessions(tx, tenantID, userID, keyID, "", now)
			if err != nil {
				return err
			}
			// Recorded once, by the use that flagged it, with the flag.
			if err := appendAudit(tx, tenantID, now, adminEvent(models.AuditKeyFlagged, models.ActorSystem, map[string]any{
				"user_id": userID, "key_id": keyID, "credential_id": row.CredentialID,
				"stored_sign_count": row.SignCount, "presented_sign_count": newCount, "sessions_ended": ended})); err != nil {
				return err
			}
		}
		row.FlaggedAt = new(ms(now))
		refusal = models.Errorf(models.EStepUpFailed,
			"Your security key's signature counter went backwards (stored %d, presented %d): a copy of the key may exist. "+
				"The key %q has been flagged and can no longer approve anything; remove it and register a new one",
			row.SignCount, newCount, row.Name)
		return nil
	})
	if err != nil {
		return models.SecurityKey{}, err
	}
	if refusal != nil {
		return models.SecurityKey{}, refusal
	}
	return row.model()
}

// flaggedError is the refusal of a key flagged as a possible clone.
func flaggedError(at time.Time) error {
	return models.Errorf(models.EStepUpFailed,
		"This security key was flagged as possibly cloned on %s (its signature counter went backwards) and can no longer approve anything; "+
			"remove it and register a new one", at.UTC().Format("2006-01-02 15:04 MST"))
}

type ceremonyRow struct {
	ID          string `gorm:"primaryKey"`
	TenantID    string
	UserID      *string
	Kind        string
	ProposalID  *string
	ArgsDigest  string
	KeyID       *string
	Nonce       string
	Challenge   string
	SessionData string
	CreatedAt   int64 `gorm:"autoCreateTime:false"`
	ExpiresAt   int64
	ConsumedAt  *int64
}

func (ceremonyRow) TableName() string { return "webauthn_ceremonies" }

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (r ceremonyRow) model() (models.Ceremony, error) {
	nonce, err := b64.DecodeString(r.Nonce)
	if err != nil {
		return models.Ceremony{}, fmt.Errorf("ceremony %s nonce: %w", r.ID, err)
	}
	return models.Ceremony{ID: r.ID, TenantID: r.TenantID, UserID: deref(r.UserID), Kind: models.CeremonyKind(r.Kind),
		ProposalID: deref(r.ProposalID), ArgsDigest: r.ArgsDigest, KeyID: deref(r.KeyID), Nonce: nonce,
		Challenge: r.Challenge, SessionData: json.RawMessage(r.SessionData), CreatedAt: fromMS(r.CreatedAt),
		ExpiresAt: fromMS(r.ExpiresAt), ConsumedAt: fromMSPtr(r.ConsumedAt)}, nil
}

// CreateCeremony stores the state of a ceremony that has begun. c.ID is
// assigned when empty. EAlreadyExists when the challenge was used before
// (challenges are unique); EUnavailable on database errors.
func (s *Store) CreateCeremony(ctx context.Context, c models.Ceremony) (models.Ceremony, error) {
	if c.ID == "" {
		c.ID = models.NewID("wac")
	}
	row := ceremonyRow{ID: c.ID, TenantID: c.TenantID, UserID: optional(c.UserID), Kind: string(c.Kind),
		ProposalID: optional(c.ProposalID), ArgsDigest: c.ArgsDigest, KeyID: optional(c.KeyID),
		Nonce: b64.EncodeToString(c.Nonce), Challenge: c.Challenge, SessionData: string(c.SessionData),
		CreatedAt: ms(c.CreatedAt), ExpiresAt: ms(c.ExpiresAt)}
	err := s.tx(ctx, func(tx *gorm.DB) error {
		ok, err := insertOnce(tx, &row)
		if err != nil {
			return err
		}
		if !ok {
			return models.Errorf(models.EAlreadyExists, "this challenge was issued before")
		}
		return nil
	})
	if err != nil {
		return models.Ceremony{}, err
	}
	return row.model()
}

// CeremonyByChallenge returns the tenant's ceremony that issued challenge
// (base64url, as in the client data), consumed or not, or ENotFound.
func (s *Store) CeremonyByChallenge(ctx context.Context, tenantID, challenge string) (models.Ceremony, error) {
	var row ceremonyRow
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND challenge = ?", tenantID, challenge).Take(&row).Error
	if err != nil {
		return models.Ceremony{}, notFound(err, "no such ceremony")
	}
	return row.model()
}

// ConsumeCeremony uses up a ceremony, once: one conditional UPDATE that
// succeeds only while it is unconsumed and unexpired at now, so of any
// number of concurrent finishes, on any number of instances, exactly one
// proceeds.
//
// Errors: EAlreadyConsumed (finished before: a replay), ECeremonyExpired
// (at or past its expiry), ENotFound, EUnavailable.
func (s *Store) ConsumeCeremony(ctx context.Context, tenantID, id string, now time.Time) error {
	return s.tx(ctx, func(tx *gorm.DB) error {
		res := tx.Model(&ceremonyRow{}).
			Where("tenant_id = ? AND id = ? AND consumed_at IS NULL AND expires_at > ?", tenantID, id, ms(now)).
			Update("consumed_at", ms(now))
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 1 {
			return nil
		}
		var row ceremonyRow
		if err := tx.Where("tenant_id = ? AND id = ?", tenantID, id).Take(&row).Error; err != nil {
			return notFound(err, "no such ceremony")
		}
		if row.ConsumedAt != nil {
			return models.Errorf(models.EAlreadyConsumed, "this security-key response was used already")
		}
		return models.Errorf(models.ECeremonyExpired, "this security-key request expired at %s",
			fromMS(row.ExpiresAt).Format(time.RFC3339))
	})
}
