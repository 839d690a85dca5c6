//go:build linux || darwin || freebsd || netbsd || openbsd

package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// TestHoldDatabaseOpen is not a test: run as a child process by
// TestRestoreRefusesADatabaseInUse, it opens the database named in its
// environment as a server does, says so, and keeps it open until its
// stdin closes.
func TestHoldDatabaseOpen(t *testing.T) {
	db := os.Getenv("COUNTERSIGN_TEST_HOLD_DB")
	if db == "" {
		t.Skip("a helper process of TestRestoreRefusesADatabaseInUse")
	}
	st, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	fmt.Println("open")
	bufio.NewReader(os.Stdin).ReadString('\n')
}

// Restoring over a database another process has open would leave that
// process writing to the replaced file, whose writes are then lost: it is
// refused, --force or not, and the database is left as it was.
func TestRestoreRefusesADatabaseInUse(t *testing.T) {
	dir := t.TempDir()
	src := tempDB(t)
	mustExec(t, nil, "", "tenant", "create", "acme", "--db", src)
	backup := filepath.Join(dir, "b.db")
	mustExec(t, nil, "", "backup", "--db", src, "--to", backup)
	live := "sqlite://" + filepath.Join(dir, "live.db")
	mustExec(t, nil, "", "tenant", "create", "live", "--db", live)

	child := exec.Command(os.Args[0], "-test.run=^TestHoldDatabaseOpen$")
	child.Env = append(os.Environ(), "COUNTERSIGN_TEST_HOLD_DB="+live)
	stdin, _ := child.StdinPipe()
	stdout, _ := child.StdoutPipe()
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); child.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "open\n" {
		t.Fatalf("the helper process: %q %v", line, err)
	}
	r := invoke(t, nil, "", "restore", "--from", backup, "--db", live, "--force")
	if !models.IsCode(r.err, models.EInvalidState) || !strings.Contains(r.err.Error(), "has "+filepath.Join(dir, "live.db")+" open") {
		t.Fatalf("restore over a database in use: %v", r.err)
	}
	stdin.Close()
	if err := child.Wait(); err != nil {
		t.Fatal(err)
	}
	if out := mustExec(t, nil, "", "restore", "--from", backup, "--db", live, "--force").stdout; !strings.Contains(out, "restored") {
		t.Fatalf("restore once it is closed: %q", out)
	}
}
