package writes_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
)

// A revocation in the middle of a stream of proposals on three service
// instances: every write the mandate confirmed was confirmed before the
// revocation took effect — the audit chain records each such token before
// the mandate.revoked entry — none after it, and the mandate's spent and
// uses are exactly those writes.
func TestMandateRevokedDuringConcurrentProposals(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		m := e.grant(lowRefunds(e, 1000, 1000000, 0), e.alice)
		// One write confirmed before any race, so that the ordering check
		// below always has a token to look at, whoever wins the races.
		pre := e.propose("ord_1001", 100)
		if pre.Status != models.StatusConfirmed || pre.MandateID != m.ID || pre.Token == nil {
			t.Fatalf("before the revocation: %s mandate %q note %q", pre.Status, pre.MandateID, pre.MandateNote)
		}
		svcs := []*writes.Service{e.svc, secondInstance(t, e), secondInstance(t, e)}
		const n = 60
		var started atomic.Int32
		revoke := make(chan struct{})
		results := make([]*models.Proposal, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if started.Add(1) == n/3 {
					close(revoke)
				}
				order := fmt.Sprintf("ord_10%02d", i%20+1)
				results[i], _, errs[i] = svcs[i%3].Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs(order, 100)})
			}()
		}
		<-revoke
		if _, err := svcs[1].RevokeMandate(e.ctx, e.admin, m.ID); err != nil {
			t.Fatal(err)
		}
		wg.Wait()

		confirmed := map[string]bool{pre.Token.JTI: true}
		for i, p := range results {
			if errs[i] != nil {
				t.Fatalf("proposal %d: %v", i, errs[i])
			}
			got, err := e.svc.Get(e.ctx, e.tenant, p.ID)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case got.Status == models.StatusConfirmed && got.MandateID == m.ID && got.Token != nil:
				confirmed[got.Token.JTI] = true
			case got.Status == models.StatusAwaitingConfirmation && got.MandateID == "":
			default:
				t.Fatalf("proposal %d: status %s mandate %q note %q", i, got.Status, got.MandateID, got.MandateNote)
			}
		}
		after := e.mandate(m.ID)
		if after.Status != models.MandateRevoked || after.Uses != int64(len(confirmed)) || after.Spent != 100*int64(len(confirmed)) {
			t.Fatalf("mandate %s spent %d uses %d, %d writes confirmed", after.Status, after.Spent, after.Uses, len(confirmed))
		}

		// The chain: every token the mandate issued, then the revocation.
		var revokedAt int64
		issued := map[string]int64{}
		for after := int64(0); ; {
			entries, err := e.store.AuditEntries(e.ctx, e.tenant, after, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) == 0 {
				break
			}
			for _, en := range entries {
				b, err := en.Decode()
				if err != nil {
					t.Fatal(err)
				}
				var data struct {
					JTI       string `json:"jti"`
					MandateID string `json:"mandate_id"`
				}
				_ = json.Unmarshal(b.Data, &data)
				switch {
				case b.Kind == models.AuditMandateRevoked && data.MandateID == m.ID:
					revokedAt = en.Seq
				case b.Kind == models.AuditTokenIssued && data.MandateID == m.ID:
					issued[data.JTI] = en.Seq
				}
			}
			after = entries[len(entries)-1].Seq
		}
		if revokedAt == 0 || len(issued) != len(confirmed) {
			t.Fatalf("chain: revoked at %d, %d tokens under the mandate, %d confirmed", revokedAt, len(issued), len(confirmed))
		}
		for jti, seq := range issued {
			if !confirmed[jti] || seq > revokedAt {
				t.Fatalf("token %s at entry %d (revoked at %d, confirmed %v)", jti, seq, revokedAt, confirmed[jti])
			}
		}
		t.Logf("%d of %d writes confirmed before the revocation", len(confirmed), n)
	})
}
