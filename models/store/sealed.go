package store

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/countersign/countersign/internal/kek"
	"github.com/countersign/countersign/models"
)

// sealedColumn is a column that holds key material: sealed with the
// key-encryption key (Options.KEK) when there is one, base64 otherwise.
// Every key store adds its columns here, so that CheckKeys and Rekey cover
// them.
type sealedColumn struct {
	table, idColumn, column string
	what                    string // for messages: "token signing key"
}

var sealedColumns = []sealedColumn{
	{"signing_keys", "kid", "private_key", "token signing key"},
	{"console_keys", "name", "hash_key", "console cookie authentication key"},
	{"console_keys", "name", "block_key", "console cookie encryption key"},
	{"webhook_endpoints", "id", "secret", "webhook signing secret"},
}

// aad binds a sealed value to its row and column: moved elsewhere, it
// does not open.
func (c sealedColumn) aad(id string) string { return c.table + "/" + id + "/" + c.column }

func column(table, name string) sealedColumn {
	for _, c := range sealedColumns {
		if c.table == table && c.column == name {
			return c
		}
	}
	panic("store: " + table + "." + name + " is not a sealed column")
}

// sealKey is the stored form of key material for the row id of column c.
func (s *Store) sealKey(c sealedColumn, id string, plain []byte) string {
	if s.kek == nil {
		return base64.StdEncoding.EncodeToString(plain)
	}
	return s.kek.Seal(plain, c.aad(id))
}

// openKey reads key material stored by sealKey (or written in plain base64
// before a KEK was configured). A value sealed under another KEK, or with
// none configured, is a KeyError saying which KEK it needs.
func (s *Store) openKey(c sealedColumn, id, stored string, extra ...*kek.KEK) ([]byte, error) {
	if _, sealed := kek.Sealed(stored); !sealed {
		b, err := base64.StdEncoding.DecodeString(stored)
		if err != nil {
			return nil, &KeyError{What: c.what, ID: id, Err: errors.New("malformed key material")}
		}
		return b, nil
	}
	b, err := kek.Open(stored, c.aad(id), append([]*kek.KEK{s.kek}, extra...)...)
	if err != nil {
		return nil, &KeyError{What: c.what, ID: id, Err: err, Configured: s.kek}
	}
	return b, nil
}

// KeyError is key material that cannot be read: sealed under another
// key-encryption key, with none configured, altered, or malformed.
type KeyError struct {
	What, ID   string
	Configured *kek.KEK
	Err        error
}

func (e *KeyError) Error() string {
	switch {
	case errors.Is(e.Err, kek.ErrNoKEK):
		return fmt.Sprintf("%s %s is encrypted (%v): give the key-encryption key in COUNTERSIGN_KEK_FILE or COUNTERSIGN_KEK (serve also takes --kek-file)", e.What, e.ID, e.Err)
	case errors.Is(e.Err, kek.ErrWrongKEK):
		return fmt.Sprintf("%s %s is %v, but the configured key-encryption key is %s: is COUNTERSIGN_KEK_FILE, COUNTERSIGN_KEK or --kek-file the wrong one?", e.What, e.ID, e.Err, e.Configured.ID())
	}
	return fmt.Sprintf("%s %s: %v", e.What, e.ID, e.Err)
}

func (e *KeyError) Unwrap() error { return e.Err }

// KeyReport is what CheckKeys found.
type KeyReport struct {
	// Sealed and Plain count stored key values by form.
	Sealed, Plain int
}

// CheckKeys opens every stored key value once: a start with the wrong
// key-encryption key (or none, for an encrypted database) fails here, with
// a *KeyError naming the key and the KEK it needs, before anything is
// served. Plain counts values still stored unencrypted.
func (s *Store) CheckKeys(ctx context.Context) (KeyReport, error) {
	var r KeyReport
	err := s.eachKey(ctx, s.db, func(c sealedColumn, id, stored string) error {
		if _, err := s.openKey(c, id, stored); err != nil {
			return err
		}
		if _, sealed := kek.Sealed(stored); sealed {
			r.Sealed++
		} else {
			r.Plain++
		}
		return nil
	})
	return r, err
}

// eachKey calls fn for every stored key value.
func (s *Store) eachKey(ctx context.Context, db *gorm.DB, fn func(c sealedColumn, id, stored string) error) error {
	for _, c := range sealedColumns {
		var rows []struct {
			ID    string
			Value string
		}
		err := db.WithContext(ctx).Table(c.table).
			Select(c.idColumn + " AS id, " + c.column + " AS value").Order(c.idColumn).Scan(&rows).Error
		if err != nil {
			return dbErr(err)
		}
		for _, row := range rows {
			if err := fn(c, row.ID, row.Value); err != nil {
				return err
			}
		}
	}
	return nil
}

// Rekey re-encrypts every stored key value under the store's KEK, in one
// transaction: values sealed under one of old (or already under the new
// KEK) and values still stored in plain are all sealed anew. Each row is
// updated only if its value is still the one read, so a concurrent change
// makes Rekey fail (EStateChanged) rather than overwrite it. It returns how
// many values it sealed.
func (s *Store) Rekey(ctx context.Context, old ...*kek.KEK) (int, error) {
	if s.kek == nil {
		return 0, models.Errorf(models.EInvalidRequest, "rekey needs the new key-encryption key (--kek-file or COUNTERSIGN_KEK)")
	}
	n := 0
	err := s.tx(ctx, func(tx *gorm.DB) error {
		return s.eachKey(ctx, tx, func(c sealedColumn, id, stored string) error {
			plain, err := s.openKey(c, id, stored, old...)
			if err != nil {
				return err
			}
			res := tx.Table(c.table).Where(c.idColumn+" = ? AND "+c.column+" = ?", id, stored).
				Update(c.column, s.kek.Seal(plain, c.aad(id)))
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected != 1 {
				return models.Errorf(models.EStateChanged, "%s %s changed during the rekey; run it again", c.what, id)
			}
			n++
			return nil
		})
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// KEK is the key-encryption key the store seals key material with; nil
// when keys are stored unencrypted.
func (s *Store) KEK() *kek.KEK { return s.kek }
