package store

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"
)

// Commits are copied into the database file by the background checkpointer
// once a thousand pages piled up, not by the writer: the writer checkpoints
// itself only past writerCheckpointPages.
func TestWALIsCheckpointedInTheBackground(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "w.db")
	st, err := Open("sqlite://"+path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var pages int
	if err := st.db.Raw("PRAGMA wal_autocheckpoint").Scan(&pages).Error; err != nil || pages != writerCheckpointPages {
		t.Fatalf("the writer checkpoints itself at %d pages (%v), want %d", pages, err, writerCheckpointPages)
	}
	ctx := context.Background()
	if err := st.db.Exec("CREATE TABLE blobs (n INTEGER PRIMARY KEY, b TEXT NOT NULL)").Error; err != nil {
		t.Fatal(err)
	}
	size := func() int64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := size()
	// 1,500 rows of 3 KB, each in a transaction of its own: a few
	// thousand WAL pages, under the writer's own threshold.
	blob := strings.Repeat("x", 3000)
	for i := range 1500 {
		if err := st.tx(ctx, func(tx *gorm.DB) error {
			return tx.Exec("INSERT INTO blobs (n, b) VALUES (?, ?)", i, blob).Error
		}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for size() < before+2<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("the database file holds %d bytes, %d before 4.5 MB were committed: no checkpoint copied them", size(), before)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
