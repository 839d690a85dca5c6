package store

import (
	"context"
	"database/sql"
	"time"

	"github.com/countersign/countersign/models"
)

// ProposalCount is how many proposals of one tool and risk tier are in one
// state, across every tenant.
type ProposalCount struct {
	Tool   string
	Tier   string
	Status models.Status
	Count  int64
}

// Stats is a snapshot of the database's operational numbers, read in one
// call for metrics.
type Stats struct {
	Proposals []ProposalCount
	// OldestPending is the creation time of the oldest proposal awaiting
	// confirmation; zero when none waits.
	OldestPending time.Time
	// Executions counts executions that are not settled, by status
	// (executing, failed_retryable, unknown).
	Executions map[models.Status]int64
	// ReconcileDue counts executions the reconciler would pick up at now:
	// unknown, or executing with an expired lease.
	ReconcileDue int64
}

// Stats reads the operational numbers at now. It only reads, and its
// queries are aggregates over indexed columns. Errors: EUnavailable.
func (s *Store) Stats(ctx context.Context, now time.Time) (Stats, error) {
	out := Stats{Executions: map[models.Status]int64{}}
	db := s.db.WithContext(ctx)
	var counts []struct {
		Tool     string
		RiskTier string
		Status   string
		N        int64
	}
	if err := db.Table("proposals").Select("tool, risk_tier, status, COUNT(*) AS n").
		Group("tool, risk_tier, status").Scan(&counts).Error; err != nil {
		return out, dbErr(err)
	}
	for _, c := range counts {
		out.Proposals = append(out.Proposals, ProposalCount{Tool: c.Tool, Tier: c.RiskTier, Status: models.Status(c.Status), Count: c.N})
	}
	var oldest sql.NullInt64
	if err := db.Table("proposals").Select("MIN(created_at)").Where(awaitingProposal).Scan(&oldest).Error; err != nil {
		return out, dbErr(err)
	}
	if oldest.Valid {
		out.OldestPending = fromMS(oldest.Int64)
	}
	var execs []struct {
		Status string
		N      int64
	}
	if err := db.Table("executions").Select("status, COUNT(*) AS n").Where(openExecution).
		Group("status").Scan(&execs).Error; err != nil {
		return out, dbErr(err)
	}
	for _, e := range execs {
		out.Executions[models.Status(e.Status)] = e.N
	}
	if err := db.Table("executions").
		Where(openExecution+" AND status IN ? AND lease_until <= ?", []string{string(models.StatusExecuting), string(models.StatusUnknown)}, ms(now)).
		Count(&out.ReconcileDue).Error; err != nil {
		return out, dbErr(err)
	}
	return out, nil
}

// DB is the connection pool, for its statistics (sql.DBStats).
func (s *Store) DB() *sql.DB { return s.sqlDB }
