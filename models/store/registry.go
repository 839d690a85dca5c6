package store

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
)

type registryRecordRow struct {
	TenantID   string `gorm:"primaryKey"`
	Digest     string
	RecordedAt int64
	Tools      string // JSON: each tool's name → the digest of its declaration
}

// RegistryRecord is the tool registry a server runs with, as the audit
// chain records it: the file's digest, and per tool its policy version and
// the digest of its declaration (registry.Registry's Digest, PolicyVersions
// and ToolDigests).
type RegistryRecord struct {
	Digest   string
	Versions map[string]string
	Tools    map[string]string
}

func (registryRecordRow) TableName() string { return "registry_records" }

// registryLock is the PostgreSQL advisory lock that orders recordings of
// the registry, so that servers starting at once record each change once.
const registryLock = 0x63730003

// registryTenant is a tenant whose chain needs the registry recorded, with
// what it recorded last (nil: nothing).
type registryTenant struct {
	ID            string
	Previous      *string
	PreviousTools *string
}

// registryTenants is the tenants whose chains need the registry with
// digest: every tenant whose chain last recorded another registry or none,
// or, with onlyNew, only those that recorded none.
func registryTenants(tx *gorm.DB, digest string, onlyNew bool) ([]registryTenant, error) {
	var out []registryTenant
	q := `SELECT t.id AS id, r.digest AS previous, r.tools AS previous_tools FROM tenants t LEFT JOIN registry_records r ON r.tenant_id = t.id
		WHERE r.tenant_id IS NULL`
	args := []any{}
	if !onlyNew {
		q += ` OR r.digest <> ?`
		args = append(args, digest)
	}
	err := tx.Raw(q+` ORDER BY t.id`, args...).Scan(&out).Error
	return out, err
}

// RecordRegistry records the tool registry a server runs with (its digest
// and each tool's policy version) in the audit chain of every tenant whose
// chain last recorded another registry or none
// (models.AuditRegistryLoaded), or, with onlyNew, of the tenants whose
// chain recorded none yet (organizations created since the server
// started): servers with different registries during a rolling upgrade
// then do not record each other's in turn. Several servers recording the
// same registry at once record it once. It returns how many chains it
// recorded in.
func (s *Store) RecordRegistry(ctx context.Context, rec RegistryRecord, onlyNew bool) (int, error) {
	digest := rec.Digest
	if digest == "" {
		return 0, nil // a registry not parsed from a file
	}
	pending, err := registryTenants(s.read.WithContext(ctx), digest, onlyNew)
	if err != nil || len(pending) == 0 {
		return 0, dbErr(err)
	}
	n := 0
	err = s.tx(ctx, func(tx *gorm.DB) error {
		n = 0
		if tx.Dialector.Name() == "postgres" {
			if err := tx.Exec("SELECT pg_advisory_xact_lock(" + strconv.Itoa(registryLock) + ", 0)").Error; err != nil {
				return err
			}
		}
		pending, err := registryTenants(tx, digest, onlyNew)
		if err != nil {
			return err
		}
		now := s.clock.Now()
		policies := make(map[string]any, len(rec.Versions))
		for k, v := range rec.Versions {
			policies[k] = v
		}
		tools := map[string]string{}
		for k, v := range rec.Tools {
			tools[k] = v
		}
		toolsJSON, err := json.Marshal(tools)
		if err != nil {
			return err
		}
		for _, t := range pending {
			// The record moves only from the digest read, so an entry is
			// appended once per change even without the lock's turn.
			row := registryRecordRow{TenantID: t.ID, Digest: digest, RecordedAt: ms(now), Tools: string(toolsJSON)}
			previous, moved := "", false
			if t.Previous != nil {
				previous = *t.Previous
				res := tx.Model(&registryRecordRow{}).Where("tenant_id = ? AND digest = ?", t.ID, previous).
					Updates(map[string]any{"digest": digest, "recorded_at": row.RecordedAt, "tools": row.Tools})
				err, moved = res.Error, res.RowsAffected == 1
			} else {
				moved, err = insertOnce(tx, &row)
			}
			if err != nil {
				return err
			}
			if !moved {
				continue
			}
			data := map[string]any{"digest": digest, "previous_digest": previous, "policy_versions": policies,
				"tool_digests": tools}
			if ch, ok := toolChanges(t.PreviousTools, tools); ok {
				data["tool_changes"] = ch
			}
			if err := appendAudit(tx, t.ID, now, adminEvent(models.AuditRegistryLoaded, models.ActorSystem, data)); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// toolChanges names the tools added, removed and changed between the
// recorded declarations previous (JSON) and now; false when there is no
// earlier record to compare with (a first record, or one from before
// declarations were recorded).
func toolChanges(previous *string, now map[string]string) (map[string][]string, bool) {
	if previous == nil {
		return nil, false
	}
	var before map[string]string
	if err := json.Unmarshal([]byte(*previous), &before); err != nil || len(before) == 0 {
		return nil, false
	}
	out := map[string][]string{"added": {}, "removed": {}, "changed": {}}
	for name, d := range now {
		switch b, ok := before[name]; {
		case !ok:
			out["added"] = append(out["added"], name)
		case b != d:
			out["changed"] = append(out["changed"], name)
		}
	}
	for name := range before {
		if _, ok := now[name]; !ok {
			out["removed"] = append(out["removed"], name)
		}
	}
	for _, names := range out {
		slices.Sort(names)
	}
	return out, true
}
