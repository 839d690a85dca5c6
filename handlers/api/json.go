package api

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/countersign/countersign/models"
)

// The response bodies of the API. They are their own types so that a change
// to a domain struct never silently changes the public JSON.

// proposalJSON is a proposal as agents see it (SPEC section 3).
type proposalJSON struct {
	ID                   string                `json:"id"`
	Tool                 string                `json:"tool"`
	Status               models.Status         `json:"status"`
	Arguments            json.RawMessage       `json:"arguments"`
	Preview              []models.PreviewField `json:"preview"`
	ArgsDigest           string                `json:"args_digest"`
	RiskTier             string                `json:"risk_tier"`
	RequiredConfirmation confirmationJSON      `json:"required_confirmation"`
	Resource             *string               `json:"resource"`
	ResourceSet          *resourceSetJSON      `json:"resource_set"`
	ResourceLabel        string                `json:"resource_label"`
	StateVersion         string                `json:"state_version"`
	PolicyVersion        string                `json:"policy_version"`
	RequestKey           string                `json:"request_key"`
	Context              string                `json:"context"`
	Agent                principalJSON         `json:"agent"`
	Revision             int64                 `json:"revision"`
	CreatedAt            string                `json:"created_at"`
	ExpiresAt            *string               `json:"expires_at"`
	UpdatedAt            string                `json:"updated_at"`
	Decisions            []decisionJSON        `json:"decisions"`
	Approvals            approvalsJSON         `json:"approvals"`
	ConfirmationToken    string                `json:"confirmation_token,omitempty"`
	Token                *tokenJSON            `json:"token"`
	Execution            *executionJSON        `json:"execution"`
	Receipt              *models.Receipt       `json:"receipt"`
	Problems             []fieldJSON           `json:"problems,omitempty"`
	// Supersedes and SupersededBy link versions a reviewer's edit made.
	Supersedes   *editJSON `json:"supersedes,omitempty"`
	SupersededBy *editJSON `json:"superseded_by,omitempty"`
	// Kind is "write", or "mandate" for a request of a standing mandate.
	Kind string `json:"kind"`
	// MandateID names the standing mandate that confirmed this write (or,
	// for a mandate proposal, the mandate its grant made live);
	// MandateNote says why a mandate covering it could not confirm it.
	MandateID   string `json:"mandate_id,omitempty"`
	MandateNote string `json:"mandate_note,omitempty"`
	// Effect is the effect preview stored with the proposal and
	// EffectDigest its digest; absent when the business system describes
	// nothing.
	Effect       *models.Description `json:"effect,omitempty"`
	EffectDigest string              `json:"effect_digest,omitempty"`
}

type confirmationJSON struct {
	Kind              models.Confirmation `json:"kind"`
	Quorum            int                 `json:"quorum"`
	TTLSeconds        int64               `json:"ttl_seconds"`
	AllowSelfApproval bool                `json:"allow_self_approval"`
}

type resourceSetJSON struct {
	IDs    []string `json:"ids"`
	Count  int      `json:"count"`
	Digest string   `json:"digest"`
}

type principalJSON struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

type decisionJSON struct {
	Reviewer   principalJSON       `json:"reviewer"`
	Decision   models.DecisionKind `json:"decision"`
	Reason     string              `json:"reason"`
	AMR        []string            `json:"amr"`
	DigestSeen string              `json:"digest_seen"`
	// EffectSeen is the effect digest the reviewer was shown, when any.
	EffectSeen string `json:"effect_seen,omitempty"`
	At         string `json:"at"`
}

type approvalsJSON struct {
	Have int `json:"have"`
	Need int `json:"need"`
	// Factors is the progress per approver group the tier requires.
	Factors []factorJSON `json:"factors,omitempty"`
}

// tokenJSON tells everyone in the tenant that a token exists and its state;
// the token itself is only in proposalJSON.ConfirmationToken.
type tokenJSON struct {
	Status    models.TokenStatus `json:"status"`
	ExpiresAt string             `json:"expires_at"`
}

type fieldJSON struct {
	Pointer string `json:"pointer"`
	Message string `json:"message"`
}

// executionJSON is an execution record (SPEC section 7).
type executionJSON struct {
	ExecutionID string `json:"execution_id"`
	ProposalID  string `json:"proposal_id"`
	RequestKey  string `json:"request_key"`
	// DownstreamKey is the Idempotency-Key the business system saw.
	DownstreamKey string            `json:"downstream_key"`
	Operation     string            `json:"operation"`
	Status        models.Status     `json:"status"`
	ArgsDigest    string            `json:"args_digest"`
	Attempts      int               `json:"attempts"`
	ProviderRef   string            `json:"provider_ref"`
	Result        json.RawMessage   `json:"result"`
	Error         *executionErrJSON `json:"error"`
	CreatedAt     string            `json:"created_at"`
	UpdatedAt     string            `json:"updated_at"`
	CompletedAt   *string           `json:"completed_at"`
}

type executionErrJSON struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// executeResponse is the answer to POST /api/v1/executions.
type executeResponse struct {
	executionJSON
	Receipt models.Receipt `json:"receipt"`
	// SignedReceipt is the receipt JWS of a settled execution (also at
	// GET /api/v1/executions/{id}/receipt).
	SignedReceipt string `json:"signed_receipt,omitempty"`
}

// listResponse is one page of proposals; NextCursor is null on the last page.
type listResponse struct {
	Items      []proposalJSON `json:"items"`
	NextCursor *string        `json:"next_cursor"`
}

// newProposalJSON renders p for agent at now.
func newProposalJSON(p *models.Proposal, agent models.Agent, now time.Time) proposalJSON {
	out := proposalJSON{
		ID:         p.ID,
		Tool:       p.Tool,
		Status:     p.Status,
		Arguments:  rawOrNull(p.Arguments),
		Preview:    p.Preview,
		ArgsDigest: p.ArgsDigest,
		RiskTier:   p.Tier.Name,
		RequiredConfirmation: confirmationJSON{
			Kind:              p.Tier.Confirmation,
			Quorum:            p.Tier.Quorum,
			TTLSeconds:        int64(p.Tier.TTL / time.Second),
			AllowSelfApproval: p.Tier.AllowSelfApproval,
		},
		ResourceLabel: p.ResourceLabel,
		StateVersion:  p.StateVersion,
		PolicyVersion: p.PolicyVersion,
		RequestKey:    p.RequestKey,
		Context:       p.Context,
		Agent:         principalJSON{ID: p.AgentID, Name: p.AgentName},
		Revision:      p.Revision,
		CreatedAt:     timestamp(p.CreatedAt),
		ExpiresAt:     optionalTimestamp(p.ExpiresAt),
		UpdatedAt:     timestamp(p.UpdatedAt),
		Decisions:     make([]decisionJSON, 0, len(p.Decisions)),
		Approvals:     newApprovalsJSON(p),
		Kind:          "write",
		MandateID:     p.MandateID,
		MandateNote:   p.MandateNote,
		Effect:        p.Effect,
		EffectDigest:  p.EffectDigest,
	}
	if p.Kind != "" {
		out.Kind = p.Kind
	}
	if out.Preview == nil {
		out.Preview = []models.PreviewField{}
	}
	if p.Batch() {
		ids := p.ResourceSet
		if ids == nil {
			ids = []string{}
		}
		out.ResourceSet = &resourceSetJSON{IDs: ids, Count: p.ResourceCount, Digest: p.ResourceSetDigest}
	} else if p.Resource != "" {
		r := p.Resource
		out.Resource = &r
	}
	for _, d := range p.Decisions {
		amr := d.AMR
		if amr == nil {
			amr = []string{}
		}
		out.Decisions = append(out.Decisions, decisionJSON{
			Reviewer:   principalJSON{ID: d.UserID, Name: d.UserName},
			Decision:   d.Kind,
			Reason:     d.Reason,
			AMR:        amr,
			DigestSeen: d.DigestSeen,
			EffectSeen: d.EffectSeen,
			At:         timestamp(d.CreatedAt),
		})
	}
	if p.Token != nil {
		out.Token = &tokenJSON{Status: p.Token.Status, ExpiresAt: timestamp(p.Token.ExpiresAt)}
		if agent.MaySeeToken(p, now) {
			out.ConfirmationToken = p.Token.Compact
		}
	}
	if p.Execution != nil {
		e := newExecutionJSON(p.Execution)
		out.Execution = &e
		r := receipt(p.Execution)
		out.Receipt = &r
	}
	out.Supersedes, out.SupersededBy = newEditJSON(p.Supersedes), newEditJSON(p.SupersededBy)
	if p.Status == models.StatusRejected {
		out.Problems = make([]fieldJSON, 0, len(p.Problems))
		for _, fp := range p.Problems {
			out.Problems = append(out.Problems, fieldJSON{Pointer: fp.Pointer, Message: fp.Message})
		}
	}
	return out
}

func newExecutionJSON(e *models.Execution) executionJSON {
	out := executionJSON{
		ExecutionID:   e.ID,
		ProposalID:    e.ProposalID,
		RequestKey:    e.RequestKey,
		DownstreamKey: e.DownstreamKey,
		Operation:     e.Operation,
		Status:        e.Status,
		ArgsDigest:    e.ArgsDigest,
		Attempts:      e.Attempts,
		ProviderRef:   e.ProviderRef,
		Result:        rawOrNull(e.Result),
		CreatedAt:     timestamp(e.CreatedAt),
		UpdatedAt:     timestamp(e.UpdatedAt),
	}
	if e.CompletedAt != nil {
		out.CompletedAt = optionalTimestamp(*e.CompletedAt)
	}
	if e.ErrorCode != "" || e.ErrorMessage != "" {
		out.Error = &executionErrJSON{Code: e.ErrorCode, Message: e.ErrorMessage}
	}
	return out
}

// receipt is e's receipt with its time in UTC, like every other time here.
func receipt(e *models.Execution) models.Receipt {
	r := e.Receipt()
	if r.CompletedAt != nil {
		t := r.CompletedAt.UTC().Truncate(time.Millisecond)
		r.CompletedAt = &t
	}
	return r
}

func timestamp(t time.Time) string { return models.FormatTime(t) }

// optionalTimestamp is null for the zero time.
func optionalTimestamp(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := timestamp(t)
	return &s
}

// rawOrNull makes an absent JSON value encode as null (an empty, non-nil
// RawMessage is not valid JSON).
func rawOrNull(m json.RawMessage) json.RawMessage {
	if len(m) == 0 {
		return nil
	}
	return m
}

// etag is the proposal's weak entity tag; the revision increases on every
// change, so it changes exactly when the representation's state does.
func etag(p *models.Proposal) string { return fmt.Sprintf(`W/"%s-%d"`, p.ID, p.Revision) }
