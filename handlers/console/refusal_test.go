package console

import (
	"strings"
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
)

// An effect_changed refusal is worded after its cause: an approval that
// named no effect, or another one, came from a page out of date (reload and
// look at the effect); one the business system now describes differently
// needs a new proposal. Each says nothing was approved.
func TestEffectRefusalWording(t *testing.T) {
	h := &Pages{}
	p := &models.Proposal{EffectDigest: "sha256:" + strings.Repeat("a", 64)}
	for _, c := range []struct {
		name        string
		err         error
		want, wantN []string
	}{
		{"none named", writes.EffectNamed(p, ""),
			[]string{"did not show what this write would do", "out of date", "Nothing was approved.", "Reload the proposal, look at the effect"},
			[]string{"propose again", "differently"}},
		{"another named", writes.EffectNamed(p, "sha256:"+strings.Repeat("0", 64)),
			[]string{"not the one stored with this proposal", "Nothing was approved.", "Reload the proposal, look at the effect"},
			[]string{"propose again", "differently"}},
		{"described differently now", &models.Error{Code: models.EEffectChanged, Message: "described differently",
			Details: map[string]any{"effect_digest": p.EffectDigest, "described_now": "sha256:" + strings.Repeat("b", 64)}},
			[]string{"now describes what this write would do differently", "Nothing was approved.", "propose again"},
			[]string{"Reload"}},
	} {
		if models.ErrorCode(c.err) != models.EEffectChanged {
			t.Fatalf("%s: code %s", c.name, models.ErrorCode(c.err))
		}
		msg := h.refusalMessage(models.EEffectChanged, "approve", p, c.err)
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: %q does not say %q", c.name, msg, w)
			}
		}
		for _, w := range c.wantN {
			if strings.Contains(msg, w) {
				t.Errorf("%s: %q says %q", c.name, msg, w)
			}
		}
	}
}
