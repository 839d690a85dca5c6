package registry

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/models"
)

// An RFC 3339 offset runs 00–23 hours and 00–59 minutes; time.Parse takes
// +24:00 and +23:60, which are refused at the field, not normalized.
func TestPrepareRefusesOutOfRangeOffsets(t *testing.T) {
	email := demoTool(t, "send_customer_email")
	for _, in := range []string{
		"2026-12-09T14:20:00+24:00",
		"2026-12-09T14:20:00-24:00",
		"2026-12-09T14:20:00+2400",
		"2026-12-09T14:20+24:00",
		"2026-12-09 14:20:00+24:00",
		"2026-12-09T14:20:00.5+24:00",
		"2026-12-09T14:20:00+23:60",
		"2026-12-09T14:20:00+00:60",
	} {
		_, err := email.Prepare([]byte(`{"customer_id":"cus_001","template":"apology","subject":"Sorry","body":"Hello","send_at":"` + in + `"}`))
		code, got := fieldPointers(t, err)
		if want := models.ESchemaViolation; code != want {
			t.Errorf("send_at %s: code = %s, want %s", in, code, want)
		}
		if want := []string{"/send_at"}; !slices.Equal(got, want) {
			t.Errorf("send_at %s: pointers = %v, want %v", in, got, want)
		}
		if me := (*models.Error)(nil); errors.As(err, &me) && (len(me.Fields) == 0 || !strings.Contains(me.Fields[0].Message, "00:00 to 23:59")) {
			t.Errorf("send_at %s: fields %+v do not say the offset's range", in, me.Fields)
		}
	}
	// The largest offsets RFC 3339 allows still normalize.
	for in, want := range map[string]string{
		"2026-12-09T14:20:00+23:59": `"2026-12-08T14:21:00Z"`,
		"2026-12-09T14:20:00-23:59": `"2026-12-10T14:19:00Z"`,
	} {
		p, err := email.Prepare([]byte(`{"customer_id":"cus_001","template":"apology","subject":"Sorry","body":"Hello","send_at":"` + in + `"}`))
		if err != nil {
			t.Errorf("send_at %s: %v", in, err)
			continue
		}
		if !strings.Contains(string(p.Arguments), `"send_at":`+want) {
			t.Errorf("send_at %s: arguments %s, want %s", in, p.Arguments, want)
		}
	}
}
