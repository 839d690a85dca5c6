package console_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestEvidenceCannotBeForged compiles, as a handler would, the two ways to
// claim a security-key approval without the step-up service: a struct
// literal of writes.Evidence, and the constructor the step-up service
// calls. Neither compiles outside models; passing on auth's sign-in
// evidence does.
func TestEvidenceCannotBeForged(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("compiles three programs with the go command")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to compile the forgery attempts: %v", err)
	}
	build := func(dir string) (string, error) {
		cmd := exec.Command(goCmd, "build", "-o", os.DevNull, "./testdata/forge/"+dir)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := build("allowed"); err != nil {
		t.Fatalf("passing on sign-in evidence does not compile: %v\n%s", err, out)
	}
	for dir, want := range map[string]string{
		"literal":  "unexported field userID",
		"internal": "use of internal package",
	} {
		out, err := build(dir)
		if err == nil {
			t.Errorf("%s: the forgery compiles", dir)
			continue
		}
		if !strings.Contains(out, want) {
			t.Errorf("%s: failed, but not for the forgery (want %q):\n%s", dir, want, out)
		}
	}
}
