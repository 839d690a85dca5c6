package httpadapter_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/countersign/countersign/models"
)

// describeRow is a change as the tests compare it.
type describeRow struct{ field, before, after, beforeText, afterText string }

func describeRows(d models.Description) []describeRow {
	var out []describeRow
	for _, c := range d.Changes {
		out = append(out, describeRow{c.Field, string(c.Before), string(c.After), c.BeforeDisplay, c.AfterDisplay})
	}
	return out
}

// Over real HTTP, signed both ways, the reference business system describes
// a refund before → after; a change it does not version (a new label)
// changes the description and its digest, not the target's version.
func TestDescribeFromTheReferenceServer(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	describe := func(order string, amount int64) (models.Description, string) {
		t.Helper()
		d, err := e.a.Describe(ctx, models.DescribeRequest{Tool: "refund", Arguments: refundArgs(order, amount), Tenant: "t1"})
		if err != nil {
			t.Fatal(err)
		}
		digest, err := models.DescriptionDigest(d)
		if err != nil {
			t.Fatal(err)
		}
		return d, digest
	}
	d, before := describe("ord_1", 100)
	if len(d.Facts) != 1 || d.Facts[0] != (models.Fact{Label: "Order", Value: "Order #1 (Ada Lovelace)"}) {
		t.Errorf("facts = %v", d.Facts)
	}
	want := describeRow{"balance", "5000", "4900", "5000 (minor units)", "4900 (minor units)"}
	if got := describeRows(d); len(got) != 1 || got[0] != want {
		t.Errorf("changes = %v, want %v", got, want)
	}
	if _, again := describe("ord_1", 100); again != before {
		t.Errorf("the same state described twice: %s, then %s", before, again)
	}
	vr, err := e.a.Validate(ctx, models.ValidateRequest{Tool: "refund", Arguments: refundArgs("ord_1", 100), Tenant: "t1", Principal: "agt"})
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Relabel("ord_1", "Order #1 (Grace Hopper)")
	vr2, err := e.a.Validate(ctx, models.ValidateRequest{Tool: "refund", Arguments: refundArgs("ord_1", 100), Tenant: "t1", Principal: "agt"})
	if err != nil || vr2.StateVersion != vr.StateVersion {
		t.Fatalf("the target's version moved: %s → %s (%v)", vr.StateVersion, vr2.StateVersion, err)
	}
	if _, after := describe("ord_1", 100); after == before {
		t.Error("the description did not change with the label")
	}
}

func TestDescribeEndpointIsOptional(t *testing.T) {
	a := stub(t, func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	_, err := a.Describe(context.Background(), models.DescribeRequest{Tool: "refund", Arguments: refundArgs("ord_1", 1), Tenant: "t1"})
	if !errors.Is(err, models.ErrNoDescription) {
		t.Errorf("a business system without /describe: %v, want ErrNoDescription", err)
	}
}

func TestDescribeRefusesUnboundedAnswers(t *testing.T) {
	change := `{"field":"f","label":"l","before":1,"after":2,"before_display":"1","after_display":"2"}`
	for name, body := range map[string]string{
		"not json":       `facts`,
		"no label":       `{"facts":[{"label":"","value":"x"}],"changes":[]}`,
		"long value":     `{"facts":[{"label":"a","value":"` + strings.Repeat("x", 501) + `"}],"changes":[]}`,
		"too many facts": `{"facts":[` + strings.TrimSuffix(strings.Repeat(`{"label":"a","value":"b"},`, 21), ",") + `]}`,
		"too many":       `{"facts":[],"changes":[` + strings.TrimSuffix(strings.Repeat(change+",", 21), ",") + `]}`,
		"unknown field":  `{"facts":[],"changes":[],"verdict":"fine"}`,
		"change label":   `{"changes":[{"field":"f","label":"","before":1,"after":2}]}`,
		"server error":   ``,
	} {
		t.Run(name, func(t *testing.T) {
			a := stub(t, func(w http.ResponseWriter, r *http.Request) {
				if body == "" {
					w.WriteHeader(http.StatusInternalServerError)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.Write([]byte(body))
			})
			_, err := a.Describe(context.Background(), models.DescribeRequest{Tool: "refund", Arguments: refundArgs("ord_1", 1), Tenant: "t1"})
			var de *models.Error
			if !errors.As(err, &de) || de.Code != models.EUnavailable {
				t.Errorf("err = %v, want %s", err, models.EUnavailable)
			}
		})
	}
}

// The README's describe answer is one this adapter accepts.
func TestDescribeREADMEAnswer(t *testing.T) {
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "```json describe-response\n")
	body, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("README has no describe-response block")
	}
	a := stub(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/describe" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(body))
	})
	got, err := a.Describe(context.Background(), models.DescribeRequest{Tool: "refund", Arguments: refundArgs("ord_1", 1), Tenant: "t1"})
	if err != nil || len(got.Facts) != 2 || len(got.Changes) != 2 ||
		got.Changes[1].BeforeDisplay != "¥500.00 CNY" || string(got.Changes[1].After) != "40000" {
		t.Errorf("description = %+v (%v)", got, err)
	}
}
