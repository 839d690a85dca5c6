//go:build linux || darwin || freebsd || netbsd || openbsd

package store_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/countersign/countersign/models/store"
)

// TestHoldDatabaseOpen is not a test: run as a child process by
// TestSQLiteInUse, it opens the database named in its environment, says
// so, and keeps it open until its stdin closes.
func TestHoldDatabaseOpen(t *testing.T) {
	path := os.Getenv("COUNTERSIGN_TEST_HOLD_DB")
	if path == "" {
		t.Skip("a helper process of TestSQLiteInUse")
	}
	st, err := store.Open("sqlite://"+path, store.Options{})
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

// Another process holding a database open is seen (a restore must not
// replace a file a server uses); once it closes the database, or when it
// was never opened, it is not.
func TestSQLiteInUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	if used, err := store.SQLiteInUse(path); err != nil || used {
		t.Fatalf("a database that does not exist: in use %v, %v", used, err)
	}
	child := exec.Command(os.Args[0], "-test.run=^TestHoldDatabaseOpen$")
	child.Env = append(os.Environ(), "COUNTERSIGN_TEST_HOLD_DB="+path)
	stdin, _ := child.StdinPipe()
	stdout, _ := child.StdoutPipe()
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "open\n" {
		child.Process.Kill()
		t.Fatalf("the helper process: %q %v", line, err)
	}
	if used, err := store.SQLiteInUse(path); err != nil || !used {
		t.Errorf("held open by another process: in use %v, %v", used, err)
	}
	stdin.Close()
	if err := child.Wait(); err != nil {
		t.Fatal(err)
	}
	if used, err := store.SQLiteInUse(path); err != nil || used {
		t.Errorf("after the other process closed it: in use %v, %v", used, err)
	}
}
