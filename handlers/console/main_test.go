package console_test

import (
	"os"
	"testing"

	"github.com/countersign/countersign/internal/testenv"
)

// Every test builds its own service over its own SQLite file and mostly
// waits on it, so they run in parallel, more at once than there are cores.
func TestMain(m *testing.M) {
	testenv.DefaultParallel(8)
	os.Exit(m.Run())
}
