package mcpserver

import (
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/registry"
)

func TestAnnotationsFollowTheSideEffect(t *testing.T) {
	for _, c := range []struct {
		effect                                    models.SideEffect
		readOnly, destructive, idempotent, openWd bool
	}{
		{models.SideEffectNone, true, false, true, false},
		{models.SideEffectReversible, false, false, false, false},
		{models.SideEffectIrreversible, false, true, false, false},
		{models.SideEffectExternal, false, true, false, true},
	} {
		a := Annotations(&registry.Tool{Title: "T", SideEffect: c.effect})
		if a.ReadOnlyHint != c.readOnly || *a.DestructiveHint != c.destructive || a.IdempotentHint != c.idempotent || *a.OpenWorldHint != c.openWd {
			t.Errorf("%s: %+v", c.effect, a)
		}
	}
}

func TestDecodeArgsNamesThePointer(t *testing.T) {
	var in struct {
		ProposalID  string `json:"proposal_id"`
		WaitSeconds *int   `json:"wait_seconds"`
	}
	for args, want := range map[string]string{
		`{"proposal_id":"p","extra":1}`:          "/extra",
		`{"proposal_id":"p","wait_seconds":"x"}`: "/wait_seconds",
		`[1]`:                                    "",
	} {
		err := decodeArgs(&mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Arguments: json.RawMessage(args)}}, &in)
		var me *models.Error
		if !asModelsError(err, &me) || me.Code != models.ESchemaViolation || len(me.Fields) != 1 || me.Fields[0].Pointer != want {
			t.Errorf("%s: %v (%+v)", args, err, me)
		}
	}
	if err := decodeArgs(&mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Arguments: json.RawMessage(`{"proposal_id":"p","wait_seconds":null}`)}}, &in); err != nil || in.ProposalID != "p" {
		t.Errorf("valid arguments: %v", err)
	}
}

func asModelsError(err error, target **models.Error) bool {
	me, ok := err.(*models.Error)
	*target = me
	return ok
}
