package writes_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/writes"
)

// BenchmarkProtocolOverhead measures what the confirmation protocol costs
// on top of the write it protects. Each iteration does one direct,
// idempotent business write (the baseline: what an agent calling the demo
// ledger without countersign would pay) and one full protocol round
// (propose → confirm → execute, the same kind of write inside). Both run in
// the same process against the same database, interleaved, so machine noise
// hits both alike; the reported x-direct-write is their ratio.
//
//	go test -run '^$' -bench ProtocolOverhead ./models/writes/
func BenchmarkProtocolOverhead(b *testing.B) {
	for _, kind := range []string{"sqlite", "postgres"} {
		b.Run(kind, func(b *testing.B) {
			e := newEnv(b, kind, nil)
			var direct, round time.Duration
			version := e.order("ord_2002").Version
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				_, err := e.ledger.Execute(e.ctx, models.ExecuteRequest{Tool: "refund_order", Tenant: e.tenant,
					Arguments:            refundArgs("ord_2002", 1),
					IdempotencyKey:       "bench-direct-" + strconv.Itoa(i),
					ExpectedStateVersion: strconv.FormatInt(version, 10)})
				direct += time.Since(t0)
				if err != nil {
					b.Fatal(err)
				}
				version++

				t1 := time.Now()
				p, _, err := e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs("ord_2003", 1)})
				if err != nil {
					b.Fatal(err)
				}
				c, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := e.svc.Execute(e.ctx, e.agent, p.ID, c.Token.Compact); err != nil {
					b.Fatal(err)
				}
				round += time.Since(t1)
			}
			b.StopTimer()
			b.ReportMetric(float64(direct.Nanoseconds())/float64(b.N), "direct-ns/op")
			b.ReportMetric(float64(round.Nanoseconds())/float64(b.N), "protocol-ns/op")
			b.ReportMetric(float64(round)/float64(direct), "x-direct-write")
		})
	}
}
