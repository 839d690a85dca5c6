package models_test

import (
	"encoding/json"
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
