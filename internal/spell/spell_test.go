package spell_test

import (
	"testing"

	"github.com/countersign/countersign/internal/spell"
)

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "abc", 3}, {"abc", "", 3}, {"minimum", "minimum", 0},
		{"minimun", "minimum", 1}, {"maxLenght", "maxLength", 1}, {"timout", "timeout", 1},
		{"qourum", "quorum", 1}, {"kitten", "sitting", 3}, {"ca", "abc", 3}, {"db", "addr", 3},
	} {
		if got := spell.Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := spell.Distance(c.b, c.a); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.b, c.a, got, c.want)
		}
	}
}
