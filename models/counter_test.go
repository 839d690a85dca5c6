package models

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestArgumentDiff(t *testing.T) {
	before := json.RawMessage(`{"amount":{"currency":"EUR","minor":500},"order_id":"o-1","note":"x","a/b":1}`)
	after := json.RawMessage(`{"order_id":"o-1","amount":{"minor":300,"currency":"EUR"},"reason":"dup","a/b":1}`)
	got, err := ArgumentDiff(before, after)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(got)
	want := `[{"pointer":"/amount","before":{"currency":"EUR","minor":500},"after":{"currency":"EUR","minor":300}},` +
		`{"pointer":"/note","before":"x","after":null},{"pointer":"/reason","before":null,"after":"dup"}]`
	if string(b) != want {
		t.Fatalf("diff\n got %s\nwant %s", b, want)
	}
	same, err := ArgumentDiff(before, before)
	if err != nil || len(same) != 0 {
		t.Fatalf("no change: %v %v", same, err)
	}
	if _, err := ArgumentDiff(before, json.RawMessage(`[1]`)); !IsCode(err, EInvalidRequest) {
		t.Fatalf("array: %v", err)
	}
	slash, _ := ArgumentDiff(json.RawMessage(`{"a/b~":1}`), json.RawMessage(`{"a/b~":2}`))
	if len(slash) != 1 || slash[0].Pointer != "/a~1b~0" {
		t.Fatalf("pointer escaping: %+v", slash)
	}
}

func TestCounterRequestKey(t *testing.T) {
	if got, want := CounterRequestKey("refund:o-1", 2), "refund:o-1:v2"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	long := strings.Repeat("k", 198)
	got := CounterRequestKey(long, 3)
	if len(got) > 200 || !strings.HasPrefix(got, "v3:") || got == CounterRequestKey(long+"x", 3) {
		t.Fatalf("long key %q", got)
	}
	if CounterRequestKey(long, 3) != got {
		t.Fatal("not deterministic")
	}
}

func TestEditorMayApprove(t *testing.T) {
	p := &Proposal{Tier: Tier{Quorum: 1, AllowSelfApproval: true}}
	if !EditorMayApprove(p, "usr_a") {
		t.Fatal("an unedited proposal has no editor to refuse")
	}
	p.Supersedes = &Counter{EditorID: "usr_a"}
	if EditorMayApprove(p, "usr_a") {
		t.Fatal("the editor approved their own edit, even though the tier allows self-approval")
	}
	if !EditorMayApprove(p, "usr_b") {
		t.Fatal("another reviewer must be able to approve an edit")
	}
}
