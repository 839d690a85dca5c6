package models_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/countersign/countersign/models"
)

// TestAuditTemplate: a body assembled from the template is byte for byte
// the canonical encoding of the complete entry, even when the data holds
// look-alikes of the chain fields.
func TestAuditTemplate(t *testing.T) {
	for _, data := range []string{`{}`, `{"prev":"countersign-prev-hash","proposal_id":"x","seq":0,"tenant":"ten_1"}`,
		`{"é":"\u00e9","n":1e3,"list":[3,2,1]}`} {
		b := models.AuditBody{Tenant: "ten_\"<1>&", At: 1796004847000, Kind: "decision.approved", Actor: "usr_1\n\x01\x7fé\"\\\u2028\b\f\r\t",
			ProposalID: "prop_1", Data: json.RawMessage(data)}
		tpl, err := b.Template()
		if err != nil {
			t.Fatal(err)
		}
		for _, pos := range []struct {
			prev string
			seq  int64
		}{{"", 1}, {"sha256:" + "ab01", 9007199254740991}} {
			b.Prev, b.Seq = pos.prev, pos.seq
			want, hash, err := b.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if got := tpl.Body(pos.prev, pos.seq); got != string(want) || models.AuditHash([]byte(got)) != hash {
				t.Fatalf("template body\n%s\nwant\n%s", got, want)
			}
		}
	}
}

type auditEnum string

type auditCount int32

// auditShouting encodes itself, as encoding/json must then ask it to.
type auditShouting string

func (s auditShouting) MarshalJSON() ([]byte, error) { return json.Marshal(strings.ToUpper(string(s))) }

type auditLabel string

func (l *auditLabel) MarshalText() ([]byte, error) { return []byte("label:" + string(*l)), nil }

// An event's template is the template of the body with its data encoded by
// encoding/json, byte for byte, whatever the data holds: the flat objects
// written directly (strings needing escapes, named string and integer
// types, integers up to 2^53) and everything else (larger integers,
// floats, types with their own encoding, lists, nested objects, keys
// beyond ASCII, invalid UTF-8, data that is no object).
func TestAuditEventTemplateMatchesTheEncodedBody(t *testing.T) {
	datas := []any{nil, map[string]any{},
		map[string]any{"tool": "refund_order", "args_digest": "sha256:ab", "quorum": 2, "expires_at": int64(1796004847000),
			"confirmation": models.ConfirmWebAuthn, "resource": "", "flag": true, "none": nil},
		map[string]any{"s": "<a href=\"x\">&amp;</a>\n\t\x01\x1f\x7f\u2028\u2029é😀\\", "k\"ey": "v", "Z": 1, "a": -1},
		map[string]any{"edge": int64(1 << 53), "neg": int64(-(1 << 53)), "i8": int8(-7), "enum": auditEnum("low"), "n": auditCount(5)},
		map[string]any{"big": int64(1<<53 + 1)}, map[string]any{"bigint": 1<<53 + 1}, map[string]any{"neg": -(1<<53 + 1)},
		map[string]any{"f": 1.5}, map[string]any{"u": uint(3)}, map[string]any{"shout": auditShouting("quiet")},
		map[string]any{"label": auditLabel("x")}, map[string]any{"amr": []string{"pwd", "hwk"}},
		map[string]any{"nested": map[string]any{"b": 1, "a": 2}}, map[string]any{"é": 1, "e": 2},
		map[string]any{"bad": "\xff\xfe"}, map[string]any{"raw": json.RawMessage(`{"z":1,"a":2}`)},
		struct {
			B string `json:"b"`
			A int    `json:"a"`
		}{"x", 1},
	}
	for i, data := range datas {
		ev := models.AuditEvent{Kind: "proposal.created", Actor: "agt_1", ProposalID: "prop_1", Data: data}
		got, err := ev.Template("ten_1", 1796004847000)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		raw := []byte("{}")
		if data != nil {
			if raw, err = json.Marshal(data); err != nil {
				t.Fatal(err)
			}
		}
		want, err := models.AuditBody{Tenant: "ten_1", At: 1796004847000, Kind: ev.Kind, Actor: ev.Actor, ProposalID: ev.ProposalID,
			Data: raw}.Template()
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if got != want {
			t.Errorf("%d: template\n%+v\nwant\n%+v", i, got, want)
		}
	}
	if _, err := (models.AuditEvent{Kind: "x", Data: func() {}}).Template("ten_1", 0); models.ErrorCode(err) != models.EInternal {
		t.Errorf("data that cannot be encoded: %v", err)
	}
}
