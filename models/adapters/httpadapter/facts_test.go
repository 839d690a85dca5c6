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

func TestFactsFromTheReferenceServer(t *testing.T) {
	e := newEnv(t)
	got, err := e.a.Facts(context.Background(), models.FactsRequest{Tool: "refund", Arguments: refundArgs("ord_1", 100), Tenant: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	want := []models.Fact{{Label: "Order", Value: "Order #1 (Ada Lovelace)"}, {Label: "Refundable balance", Value: "5000 (minor units)"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("facts = %v, want %v", got, want)
	}
}

func TestFactsEndpointIsOptional(t *testing.T) {
	a := stub(t, func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	got, err := a.Facts(context.Background(), models.FactsRequest{Tool: "refund", Arguments: refundArgs("ord_1", 1), Tenant: "t1"})
	if err != nil || got != nil {
		t.Errorf("a business system without /facts: facts %v, err %v; want none, no error", got, err)
	}
}

func TestFactsRefusesUnboundedAnswers(t *testing.T) {
	for name, body := range map[string]string{
		"not json":     `facts`,
		"no label":     `{"facts":[{"label":"","value":"x"}]}`,
		"long value":   `{"facts":[{"label":"a","value":"` + strings.Repeat("x", 501) + `"}]}`,
		"too many":     `{"facts":[` + strings.TrimSuffix(strings.Repeat(`{"label":"a","value":"b"},`, 21), ",") + `]}`,
		"server error": ``,
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
			_, err := a.Facts(context.Background(), models.FactsRequest{Tool: "refund", Arguments: refundArgs("ord_1", 1), Tenant: "t1"})
			var de *models.Error
			if !errors.As(err, &de) || de.Code != models.EUnavailable {
				t.Errorf("err = %v, want %s", err, models.EUnavailable)
			}
		})
	}
}

// The README's facts answer is one this adapter accepts.
func TestFactsREADMEAnswer(t *testing.T) {
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "```json facts-response\n")
	body, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("README has no facts-response block")
	}
	a := stub(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/facts" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(body))
	})
	got, err := a.Facts(context.Background(), models.FactsRequest{Tool: "refund", Arguments: refundArgs("ord_1", 1), Tenant: "t1"})
	if err != nil || len(got) != 3 || got[2] != (models.Fact{Label: "Refundable", Value: "¥500.00 CNY"}) {
		t.Errorf("facts = %v (%v)", got, err)
	}
}
