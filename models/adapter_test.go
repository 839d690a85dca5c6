package models_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/countersign/countersign/models"
)

func refundDescription(refundableAfter string) models.Description {
	return models.Description{
		Facts: []models.Fact{{Label: "Paid", Value: "¥800.00 CNY"}},
		Changes: []models.Change{{Field: "refundable_minor", Label: "Refundable", Before: json.RawMessage(`50000`),
			After: json.RawMessage(refundableAfter), BeforeDisplay: "¥500.00 CNY", AfterDisplay: "¥400.00 CNY"}},
	}
}

// The effect digest is the canonical (RFC 8785) digest of the description:
// the same described state gives the same digest however its machine
// values were spelled, and any change of a value changes it.
func TestDescriptionDigest(t *testing.T) {
	digest := func(d models.Description) string {
		t.Helper()
		if err := d.Check(); err != nil {
			t.Fatal(err)
		}
		s, err := models.DescriptionDigest(d)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := digest(refundDescription(`40000`))
	if !strings.HasPrefix(a, models.DigestPrefix) {
		t.Fatalf("digest %q", a)
	}
	if b := digest(refundDescription(`4e4`)); b != a {
		t.Errorf("40000 and 4e4 digest differently: %s, %s", a, b)
	}
	if c := digest(refundDescription(`40001`)); c == a {
		t.Error("another after value gives the same digest")
	}
	other := refundDescription(`40000`)
	other.Facts[0].Value = "¥800.01 CNY"
	if digest(other) == a {
		t.Error("another fact gives the same digest")
	}
	// Absent lists and empty lists are one description.
	if digest(models.Description{}) != digest(models.Description{Facts: []models.Fact{}, Changes: []models.Change{}}) {
		t.Error("absent and empty lists digest differently")
	}
}

func TestDescriptionCheckRefusesOutOfBounds(t *testing.T) {
	many := make([]models.Fact, models.MaxFacts+1)
	for i := range many {
		many[i] = models.Fact{Label: "a", Value: "b"}
	}
	for name, d := range map[string]models.Description{
		"too many facts": {Facts: many},
		"empty label":    {Facts: []models.Fact{{Label: "", Value: "x"}}},
		"long value":     {Facts: []models.Fact{{Label: "a", Value: strings.Repeat("x", models.MaxDescribeValue+1)}}},
		"not json":       {Changes: []models.Change{{Field: "f", Label: "l", Before: json.RawMessage(`{`), After: json.RawMessage(`1`)}}},
		"change label":   {Changes: []models.Change{{Field: "f", Before: json.RawMessage(`1`), After: json.RawMessage(`2`)}}},
		"long machine":   {Changes: []models.Change{{Field: "f", Label: "l", Before: json.RawMessage(`"` + strings.Repeat("x", models.MaxDescribeMachine) + `"`), After: json.RawMessage(`1`)}}},
		// Valid JSON without a canonical form, which the digest needs.
		"number out of range": {Changes: []models.Change{{Field: "f", Label: "l", Before: json.RawMessage(`1e400`), After: json.RawMessage(`1`)}}},
		"duplicate key":       {Changes: []models.Change{{Field: "f", Label: "l", Before: json.RawMessage(`1`), After: json.RawMessage(`{"a":1,"a":2}`)}}},
		"lone surrogate":      {Changes: []models.Change{{Field: "f", Label: "l", Before: json.RawMessage(`"\ud800"`), After: json.RawMessage(`1`)}}},
	} {
		if err := d.Check(); err == nil {
			t.Errorf("%s: accepted", name)
			if _, err := models.DescriptionDigest(d); err != nil {
				t.Errorf("%s: accepted, then the digest fails: %v", name, err)
			}
		}
	}
	d := models.Description{Changes: []models.Change{{Field: "f", Label: "l"}}}
	if err := d.Check(); err != nil || string(d.Changes[0].Before) != "null" {
		t.Errorf("a change without machine values: %v, before %s; want null", err, d.Changes[0].Before)
	}
}
