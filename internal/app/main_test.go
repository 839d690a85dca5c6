package app_test

import (
	"testing"

	"github.com/countersign/countersign/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
