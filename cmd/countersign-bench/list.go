package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
)

// pendingCount is how many proposals await confirmation while the history
// grows: less than a page.
const pendingCount = 20

// benchList times the reads whose cost must not grow with history, on two
// databases side by side: small with 1,000 stored proposals and large with
// cfg.ListN, the pending ones always the same handful. The reads are the
// agent API's status-filtered list, the console's pending list and history
// (also searched by a target with no settled proposal), and the audit
// views (a page of the tenant's chain from its middle, one proposal's
// trail). Each read is timed on one database and then on the other, call by
// call (timePair), so that machine noise falls on both alike; the ratio
// is of the medians. History rows are
// copies of a real proposal inserted with SQL in bulk (older than the
// pending ones, in settled states, each with an audit entry), which is
// what months of use leave behind. The console's views are timed at the
// model the console calls, without HTTP and page rendering.
func benchList(ctx context.Context, cfg config, small, large *server, rep *report) error {
	var views [2][]view
	for k, srv := range []*server{small, large} {
		var tmpl string
		for i := range pendingCount {
			p, err := srv.propose(ctx, i)
			if err != nil {
				return err
			}
			tmpl = p.ID
		}
		n := 1000
		if srv == large {
			n = cfg.ListN
		}
		if err := grow(ctx, srv, tmpl, n-pendingCount, 0); err != nil {
			return err
		}
		views[k] = listViews(srv, tmpl)
	}
	for i := range views[0] {
		at, err := timePair(ctx, cfg.Rounds, views[0][i].read, views[1][i].read)
		if err != nil {
			return fmt.Errorf("%s: %w", views[0][i].name, err)
		}
		s, l := median(at[0]), median(at[1])
		rep.rows = append(rep.rows, row{Name: fmt.Sprintf("%s, %s, 1k vs %s stored", views[0][i].name, large.kind, count(cfg.ListN)),
			Product: fmt.Sprintf("p50 %s at %s", ms(l), count(cfg.ListN)), Baseline: fmt.Sprintf("p50 %s at 1k", ms(s)),
			Ratio: float64(l) / float64(s), RatioOf: "time at N vs at 1k"})
	}
	return nil
}

// timePair times two reads alternately, one call of each after the
// other, which goes first alternating too: rounds of 25 pairs, the first
// 5 of each round a warm-up. Noise of the machine falls on both alike.
func timePair(ctx context.Context, rounds int, a, b func(context.Context) error) ([2][]time.Duration, error) {
	var at [2][]time.Duration
	reads := [2]func(context.Context) error{a, b}
	for r := range rounds {
		for i := range 25 {
			for j := range 2 {
				k := (i + r + j) % 2
				t := time.Now()
				if err := reads[k](ctx); err != nil {
					return at, err
				}
				if i >= 5 {
					at[k] = append(at[k], time.Since(t))
				}
			}
		}
	}
	return at, nil
}

func median(d []time.Duration) time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}

// view is one read the list measurement times.
type view struct {
	name string
	read func(ctx context.Context) error
}

// historyStatuses are the statuses the console's history shows.
var historyStatuses = models.HistoryStatuses

func listViews(srv *server, tmpl string) []view {
	pr := srv.app.Protocol
	tenant := srv.agent.TenantID
	return []view{
		{"status-filtered list (API)", func(ctx context.Context) error {
			return srv.do(ctx, "GET", "/api/v1/proposals?status=awaiting_confirmation", nil, 200)
		}},
		{"console pending list", func(ctx context.Context) error {
			// As the console's pending page: by time left, with decisions,
			// and the count of all awaiting.
			if _, err := pr.List(ctx, tenant, writes.ListQuery{Statuses: []models.Status{models.StatusAwaitingConfirmation},
				ByTimeLeft: true, WithDecisions: true, Limit: 25}); err != nil {
				return err
			}
			_, err := pr.CountAwaiting(ctx, tenant)
			return err
		}},
		{"console history", func(ctx context.Context) error {
			// As the console's history page: a page, then each proposal.
			page, err := pr.List(ctx, tenant, writes.ListQuery{Statuses: historyStatuses, Limit: 20})
			for _, p := range page.Items {
				if err == nil {
					_, err = pr.Get(ctx, tenant, p.ID)
				}
			}
			return err
		}},
		{"console history by a rare target", func(ctx context.Context) error {
			_, err := pr.List(ctx, tenant, writes.ListQuery{Statuses: historyStatuses, Resource: "cus_none", Limit: 20})
			return err
		}},
		{"audit log page (console, API)", func(ctx context.Context) error {
			h, err := srv.app.Store.Head(ctx, tenant)
			if err == nil {
				_, _, _, err = pr.AuditEntries(ctx, tenant, h.Seq/2, 100)
			}
			return err
		}},
		{"proposal audit trail (console)", func(ctx context.Context) error {
			_, err := pr.ProposalAudit(ctx, tenant, tmpl)
			return err
		}},
	}
}

func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// grow inserts n settled copies of proposal tmpl, numbered from offset,
// in batches, each older than the last and with a target of its own among
// a few thousand, and for each a copy of tmpl's first audit entry at the
// head of the tenant's chain.
func grow(ctx context.Context, srv *server, tmpl string, n, offset int) error {
	db := srv.raw
	rows, err := db.QueryContext(ctx, "SELECT * FROM proposals WHERE 1 = 0")
	if err != nil {
		return err
	}
	cols, err := rows.Columns()
	rows.Close()
	if err != nil {
		return err
	}
	sel := make([]string, len(cols))
	for i, c := range cols {
		switch c {
		case "id", "request_key":
			sel[i] = fmt.Sprintf("p.%s || '_h' || CAST(n.i AS TEXT)", c)
		case "status":
			sel[i] = "CASE n.i % 4 WHEN 0 THEN 'succeeded' WHEN 1 THEN 'declined' WHEN 2 THEN 'expired' ELSE 'failed_terminal' END"
		case "created_at", "updated_at":
			sel[i] = fmt.Sprintf("p.%s - n.i * 1000", c)
		case "expires_at":
			sel[i] = "p.created_at - n.i * 1000 + 300000"
		case "resource":
			sel[i] = "p.resource || '_' || CAST(n.i % 5000 AS TEXT)"
		default:
			sel[i] = "p." + c
		}
	}
	ph := func(k int) string {
		if srv.kind == "postgres" {
			return fmt.Sprintf("$%d", k)
		}
		return "?"
	}
	const step = 50_000
	for from := offset + 1; from <= offset+n; from += step {
		to := min(from+step-1, offset+n)
		q := fmt.Sprintf(`WITH RECURSIVE n(i) AS (SELECT CAST(%s AS BIGINT) UNION ALL SELECT i + 1 FROM n WHERE i < %s)
			INSERT INTO proposals (%s) SELECT %s FROM proposals p, n WHERE p.id = %s`,
			ph(1), ph(2), strings.Join(cols, ", "), strings.Join(sel, ", "), ph(3))
		if srv.kind == "postgres" {
			// PostgreSQL wants the CTE after INSERT's target.
			q = fmt.Sprintf(`INSERT INTO proposals (%s) WITH RECURSIVE n(i) AS (SELECT CAST(%s AS BIGINT) UNION ALL SELECT i + 1 FROM n WHERE i < %s)
				SELECT %s FROM proposals p, n WHERE p.id = %s`,
				strings.Join(cols, ", "), ph(1), ph(2), strings.Join(sel, ", "), ph(3))
		}
		if _, err := db.ExecContext(ctx, q, from, to, tmpl); err != nil {
			return fmt.Errorf("bulk insert: %w", err)
		}
		var head int64
		if err := db.QueryRowContext(ctx, "SELECT COALESCE(MAX(seq), 0) FROM audit_entries WHERE tenant_id = "+ph(1),
			srv.agent.TenantID).Scan(&head); err != nil {
			return err
		}
		a := fmt.Sprintf(`WITH RECURSIVE n(i) AS (SELECT CAST(%s AS BIGINT) UNION ALL SELECT i + 1 FROM n WHERE i < %s)
			INSERT INTO audit_entries (tenant_id, seq, prev_hash, hash, kind, proposal_id, body, created_at)
			SELECT e.tenant_id, %s + n.i - %s + 1, e.prev_hash, e.hash, e.kind, e.proposal_id || '_h' || CAST(n.i AS TEXT), e.body, e.created_at
			FROM n, (SELECT * FROM audit_entries WHERE proposal_id = %s ORDER BY seq LIMIT 1) e`,
			ph(1), ph(2), ph(3), ph(4), ph(5))
		if srv.kind == "postgres" {
			a = fmt.Sprintf(`INSERT INTO audit_entries (tenant_id, seq, prev_hash, hash, kind, proposal_id, body, created_at)
				WITH RECURSIVE n(i) AS (SELECT CAST(%s AS BIGINT) UNION ALL SELECT i + 1 FROM n WHERE i < %s)
				SELECT e.tenant_id, CAST(%s AS BIGINT) + n.i - CAST(%s AS BIGINT) + 1, e.prev_hash, e.hash, e.kind, e.proposal_id || '_h' || CAST(n.i AS TEXT), e.body, e.created_at
				FROM n, (SELECT * FROM audit_entries WHERE proposal_id = %s ORDER BY seq LIMIT 1) e`,
				ph(1), ph(2), ph(3), ph(4), ph(5))
		}
		if _, err := db.ExecContext(ctx, a, from, to, head, from, tmpl); err != nil {
			return fmt.Errorf("bulk insert of audit entries: %w", err)
		}
	}
	if srv.kind == "postgres" {
		// What autovacuum does soon after a bulk load: statistics, and
		// the visibility map that lets index-only scans skip the table.
		for _, t := range []string{"proposals", "audit_entries"} {
			if _, err := db.ExecContext(ctx, "VACUUM ANALYZE "+t); err != nil {
				return err
			}
		}
	}
	return nil
}

// benchReadStall times executes through the API with cfg.ListN proposals
// stored, alone and while one agent re-lists without pause (the pending
// list, the first page of everything, a page of one settled status, in
// turn), the two interleaved batch by batch. Reads that queued behind or
// ahead of the writes on one connection would show as a p99 many times
// the baseline's.
func benchReadStall(ctx context.Context, cfg config, srv *server, rep *report) error {
	lists := []string{"/api/v1/proposals?status=awaiting_confirmation", "/api/v1/proposals", "/api/v1/proposals?status=succeeded"}
	var alone, during []batch
	var listed int64
	for r := range 2 * cfg.Rounds {
		work, err := srv.confirmed(ctx, cfg.Ops)
		if err != nil {
			return err
		}
		withLister := r%2 == 1
		lctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var lerr error
		if withLister {
			wg.Go(func() {
				for i := 0; lctx.Err() == nil; i++ {
					if err := srv.do(lctx, "GET", lists[i%len(lists)], nil, 200); err != nil && lctx.Err() == nil {
						lerr = err
						return
					}
					listed++
				}
			})
		}
		b, err := runBatch(ctx, cfg.Ops, 1, func(ctx context.Context, i int) error {
			body := fmt.Appendf(nil, `{"proposal_id":%q,"token":%q}`, work[i][0], work[i][1])
			return srv.do(ctx, "POST", "/api/v1/executions", body, 200)
		})
		stop()
		wg.Wait()
		if err != nil {
			return err
		}
		if lerr != nil {
			return fmt.Errorf("listing: %w", lerr)
		}
		if withLister {
			during = append(during, b)
		} else {
			alone = append(alone, b)
		}
	}
	d, a := summarize(during), summarize(alone)
	rep.rows = append(rep.rows, row{Name: fmt.Sprintf("execute while one agent re-lists, %s, %s stored", srv.kind, count(cfg.ListN)),
		Product:  fmt.Sprintf("p50 %s, p99 %s (%d lists meanwhile)", ms(d.p50), ms(d.p99), listed),
		Baseline: fmt.Sprintf("execute alone: p50 %s, p99 %s", ms(a.p50), ms(a.p99)),
		Ratio:    float64(d.p99) / float64(a.p99), RatioOf: "p99 with the lister vs alone",
		Ratio2: float64(d.p50) / float64(a.p50), Ratio2Of: "p50 with the lister vs alone"})
	return nil
}
