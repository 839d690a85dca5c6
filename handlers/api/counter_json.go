package api

import (
	"encoding/json"

	"github.com/countersign/countersign/models"
)

// editJSON is a reviewer's edit that links two versions of a proposal
// (models.Counter): on the original it is superseded_by, on the revised
// version supersedes. Changes list the top-level arguments that differ,
// with before/after machine values (null when added or removed).
type editJSON struct {
	Original string          `json:"original_id"`
	Revised  string          `json:"revised_id"`
	Version  int             `json:"version"`
	Editor   principalJSON   `json:"editor"`
	Reason   string          `json:"reason"`
	Changes  []argChangeJSON `json:"changes"`
	At       string          `json:"at"`
	RootKey  string          `json:"root_request_key"`
}

type argChangeJSON struct {
	Pointer string          `json:"pointer"`
	Before  json.RawMessage `json:"before"`
	After   json.RawMessage `json:"after"`
}

func newEditJSON(c *models.Counter) *editJSON {
	if c == nil {
		return nil
	}
	out := &editJSON{Original: c.OriginalID, Revised: c.RevisedID, Version: c.Version,
		Editor: principalJSON{ID: c.EditorID, Name: c.EditorName}, Reason: c.Reason,
		Changes: make([]argChangeJSON, 0, len(c.Changes)), At: timestamp(c.CreatedAt), RootKey: c.RootRequestKey}
	for _, ch := range c.Changes {
		out.Changes = append(out.Changes, argChangeJSON{Pointer: ch.Pointer, Before: rawOrNull(ch.Before), After: rawOrNull(ch.After)})
	}
	return out
}

// factorJSON is one approver-group factor of the tier: count approvals
// needed from group, the reviewers counted toward it so far, and met.
type factorJSON struct {
	Group     string          `json:"group"`
	Count     int             `json:"count"`
	Have      int             `json:"have"`
	Met       bool            `json:"met"`
	Approvers []principalJSON `json:"approvers"`
}

// newApprovalsJSON is p's approval meter (models.Proposal.ApprovalCount)
// with its factors.
func newApprovalsJSON(p *models.Proposal) approvalsJSON {
	have, need := p.ApprovalCount()
	return approvalsJSON{Have: have, Need: need, Factors: newFactorsJSON(p)}
}

func newFactorsJSON(p *models.Proposal) []factorJSON {
	if len(p.Progress) == 0 {
		return nil
	}
	names := map[string]string{}
	for _, d := range p.Decisions {
		names[d.UserID] = d.UserName
	}
	out := make([]factorJSON, 0, len(p.Progress))
	for _, f := range p.Progress {
		fj := factorJSON{Group: f.Group, Count: f.Count, Have: len(f.Approvers), Met: f.Met(), Approvers: []principalJSON{}}
		for _, id := range f.Approvers {
			fj.Approvers = append(fj.Approvers, principalJSON{ID: id, Name: names[id]})
		}
		out = append(out, fj)
	}
	return out
}
