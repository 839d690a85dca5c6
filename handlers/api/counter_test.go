package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/countersign/countersign/models"
)

// The agent reads a reviewer's edit on both versions: superseded_by on the
// original, supersedes on the new one, each with the editor, the reason
// and the changed arguments.
func TestProposalJSONShowsTheEdit(t *testing.T) {
	f := newFake()
	edit := &models.Counter{OriginalID: "prop_1", RevisedID: "prop_2", EditorID: "usr_b", EditorName: "bob",
		Reason: "three items came back", Version: 2, RootRequestKey: "k1", CreatedAt: testNow,
		Changes: []models.ArgChange{{Pointer: "/amount_minor", Before: json.RawMessage(`100`), After: json.RawMessage(`300`)},
			{Pointer: "/note", After: json.RawMessage(`"x"`)}}}
	orig := sampleProposal("prop_1")
	orig.Status, orig.SupersededBy = models.StatusSuperseded, edit
	rev := sampleProposal("prop_2")
	rev.RequestKey, rev.Supersedes = "k1:v2", edit
	f.add(orig)
	f.add(rev)
	plain := sampleProposal("prop_3")
	f.add(plain)
	srv := newServer(t, f)

	want := `{"original_id":"prop_1","revised_id":"prop_2","version":2,"editor":{"id":"usr_b","name":"bob"},` +
		`"reason":"three items came back","changes":[{"pointer":"/amount_minor","before":100,"after":300},` +
		`{"pointer":"/note","before":null,"after":"x"}],"at":"` + testNow.UTC().Format("2006-01-02T15:04:05.000Z") + `","root_request_key":"k1"}`
	for id, key := range map[string]string{"prop_1": "superseded_by", "prop_2": "supersedes"} {
		r := do(t, srv, request{method: "GET", path: "/api/v1/proposals/" + id, key: keyA})
		if r.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d (%s)", id, r.StatusCode, r.body)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(r.body, &m); err != nil {
			t.Fatal(err)
		}
		if got := string(m[key]); got != want {
			t.Errorf("%s %s\n got %s\nwant %s", id, key, got, want)
		}
	}
	r := do(t, srv, request{method: "GET", path: "/api/v1/proposals/prop_1", key: keyA})
	if m := decodeMap(t, r); m["status"] != "superseded" {
		t.Errorf("status %v", m["status"])
	}
	r = do(t, srv, request{method: "GET", path: "/api/v1/proposals/prop_3", key: keyA})
	m := decodeMap(t, r)
	for _, k := range []string{"supersedes", "superseded_by"} {
		if _, ok := m[k]; ok {
			t.Errorf("an unedited proposal has %q", k)
		}
	}
}

// A tier with approver groups shows the agent each group's progress.
func TestProposalJSONShowsGroupProgress(t *testing.T) {
	f := newFake()
	p := sampleProposal("prop_1")
	p.Tier.Require = []models.Factor{{Group: "finance", Count: 1}, {Group: "security", Count: 1}}
	p.Decisions = []models.Decision{{ID: "dec_1", ProposalID: "prop_1", UserID: "usr_f", UserName: "fay", Kind: models.DecisionApprove, CreatedAt: testNow}}
	p.Progress = []models.FactorProgress{{Factor: p.Tier.Require[0], Approvers: []string{"usr_f"}}, {Factor: p.Tier.Require[1]}}
	f.add(p)
	srv := newServer(t, f)
	r := do(t, srv, request{method: "GET", path: "/api/v1/proposals/prop_1", key: keyA})
	var m struct {
		Approvals json.RawMessage `json:"approvals"`
	}
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatal(err)
	}
	want := `{"have":1,"need":2,"factors":[{"group":"finance","count":1,"have":1,"met":true,"approvers":[{"id":"usr_f","name":"fay"}]},` +
		`{"group":"security","count":1,"have":0,"met":false,"approvers":[]}]}`
	if string(m.Approvals) != want {
		t.Fatalf("approvals\n got %s\nwant %s", m.Approvals, want)
	}
}

// The approval meter never reads complete while a group is still short,
// and a write a mandate confirmed needed no approval.
func TestProposalJSONCountsWhatIsStillNeeded(t *testing.T) {
	f := newFake()
	short := sampleProposal("prop_1")
	short.Tier.Require = []models.Factor{{Group: "finance", Count: 1}}
	// An approver outside finance counts toward the quorum only.
	short.Decisions = []models.Decision{{ID: "dec_1", ProposalID: "prop_1", UserID: "usr_x", UserName: "xi", Kind: models.DecisionApprove, CreatedAt: testNow}}
	short.Progress = []models.FactorProgress{{Factor: short.Tier.Require[0]}}
	f.add(short)
	auto := sampleProposal("prop_2")
	auto.Status, auto.MandateID = models.StatusConfirmed, "mdt_1"
	f.add(auto)
	srv := newServer(t, f)
	for id, want := range map[string]string{
		"prop_1": `{"have":1,"need":2,"factors":[{"group":"finance","count":1,"have":0,"met":false,"approvers":[]}]}`,
		"prop_2": `{"have":0,"need":0}`,
	} {
		r := do(t, srv, request{method: "GET", path: "/api/v1/proposals/" + id, key: keyA})
		var m struct {
			Approvals json.RawMessage `json:"approvals"`
		}
		if err := json.Unmarshal(r.body, &m); err != nil {
			t.Fatal(err)
		}
		if string(m.Approvals) != want {
			t.Errorf("%s approvals\n got %s\nwant %s", id, m.Approvals, want)
		}
	}
}
