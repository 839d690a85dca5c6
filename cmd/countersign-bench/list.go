package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// pendingCount is how many proposals await confirmation while the history
// grows: less than a page.
const pendingCount = 20

// benchList times the agent API's status-filtered list with 1,000 stored
// proposals and again with cfg.ListN, the pending ones always the same
// handful. History rows are copies of a real proposal inserted with SQL in
// bulk (older than the pending ones, in settled states), which is what
// months of use leave behind.
func benchList(ctx context.Context, cfg config, srv *server, rep *report) error {
	var tmpl string
	for i := range pendingCount {
		p, err := srv.propose(ctx, i)
		if err != nil {
			return err
		}
		tmpl = p.ID
	}
	if err := grow(ctx, srv, tmpl, 1000-pendingCount, 0); err != nil {
		return err
	}
	small, err := timeList(ctx, srv)
	if err != nil {
		return err
	}
	if err := grow(ctx, srv, tmpl, cfg.ListN-1000, 1000); err != nil {
		return err
	}
	large, err := timeList(ctx, srv)
	if err != nil {
		return err
	}
	rep.rows = append(rep.rows, row{Name: fmt.Sprintf("status-filtered list (API), %s, 1k vs %s stored", srv.kind, count(cfg.ListN)),
		Product: fmt.Sprintf("p50 %s at %s", ms(large), count(cfg.ListN)), Baseline: fmt.Sprintf("p50 %s at 1k", ms(small)),
		Ratio: float64(large) / float64(small), RatioOf: "time at N vs at 1k"})
	return nil
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

// timeList is the median time of the list request, over several tries
// after a warm-up.
func timeList(ctx context.Context, srv *server) (time.Duration, error) {
	var d []time.Duration
	for i := range 25 {
		t := time.Now()
		if err := srv.do(ctx, "GET", "/api/v1/proposals?status=awaiting_confirmation", nil, 200); err != nil {
			return 0, err
		}
		if i >= 5 {
			d = append(d, time.Since(t))
		}
	}
	slices.Sort(d)
	return d[len(d)/2], nil
}

// grow inserts n settled copies of proposal tmpl, numbered from offset,
// in batches, each older than the last.
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
	}
	if srv.kind == "postgres" {
		// What autovacuum does soon after a bulk load.
		if _, err := db.ExecContext(ctx, "ANALYZE proposals"); err != nil {
			return err
		}
	}
	return nil
}
