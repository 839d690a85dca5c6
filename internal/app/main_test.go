package app_test

import (
	"testing"

	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/testenv"
)

// Every test here runs its own server over its own database and mostly
// waits (on HTTP, timeouts, Chromium), so they run in parallel, more at
// once than there are cores.
func TestMain(m *testing.M) {
	testenv.DefaultParallel(8)
	pgtest.Main(m)
}
