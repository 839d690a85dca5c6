package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"

	"github.com/countersign/countersign/internal/secret"
)

// signIns is how many sign-ins the password measurement runs at once.
const signIns = 50

// benchSignIns checks the password hashes' memory bound: the peak RSS
// while 50 sign-ins verify a password at once, against the peak of one
// sign-in alone, with the server's default hash costs (argon2id, 64 MiB
// each) and its default bound on concurrent hashes (one per core).
func benchSignIns(rep *report) error {
	pw, err := secret.NewPasswords(secret.DefaultPasswordParams, 0)
	if err != nil {
		return err
	}
	hash, err := pw.Hash("bench-reviewer-password")
	if err != nil {
		return err
	}
	peak := func(n int) (int64, error) {
		runtime.GC()
		debug.FreeOSMemory()
		// Writing 5 to clear_refs resets the peak (VmHWM) to the
		// current RSS.
		if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
			return 0, fmt.Errorf("resetting the peak RSS: %w", err)
		}
		base, err := procStatus("VmHWM:")
		if err != nil {
			return 0, err
		}
		var wg sync.WaitGroup
		var bad sync.Once
		ok := true
		for range n {
			wg.Go(func() {
				if !pw.Verify(hash, "bench-reviewer-password") {
					bad.Do(func() { ok = false })
				}
			})
		}
		wg.Wait()
		if !ok {
			return 0, fmt.Errorf("a sign-in's password did not verify")
		}
		hwm, err := procStatus("VmHWM:")
		return hwm - base, err
	}
	one, err := peak(1)
	if err != nil {
		return err
	}
	many, err := peak(signIns)
	if err != nil {
		return err
	}
	rep.rows = append(rep.rows, row{Name: fmt.Sprintf("%d concurrent sign-ins (argon2id, %d MiB each)", signIns, secret.DefaultPasswordParams.MemoryKiB/1024),
		Product:  fmt.Sprintf("peak RSS +%d MiB, at most %d hashes at once", many>>20, runtime.GOMAXPROCS(0)),
		Baseline: fmt.Sprintf("one sign-in: peak RSS +%d MiB", one>>20),
		Ratio:    float64(many) / float64(one), RatioOf: "peak RSS growth vs one sign-in"})
	return nil
}

// procStatus reads a size field (in kB) of /proc/self/status, in bytes.
func procStatus(field string) (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("reading /proc/self/status: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/self/status", field)
}
