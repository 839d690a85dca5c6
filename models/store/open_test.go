package store_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/migrations"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

const openMigration = "00020_open_partial_indexes.sql"

// quoted returns the string literals of a predicate, in order.
func quoted(pred string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`'([^']*)'`).FindAllStringSubmatch(pred, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestOpenIndexPredicates: every partial index of the migration is
// declared with the very predicate its queries carry, and each predicate
// names exactly the open statuses of the state machine: a status missing
// from an index would hide its rows from the sweeps that look for them
// (the planner would no longer use the index, or a query would).
func TestOpenIndexPredicates(t *testing.T) {
	t.Parallel()
	text, err := migrations.FS.ReadFile(openMigration)
	if err != nil {
		t.Fatal(err)
	}
	up, _, ok := strings.Cut(string(text), "-- +goose Down")
	if !ok {
		t.Fatal("the migration has no Down")
	}
	re := regexp.MustCompile(`(?m)^CREATE INDEX (\w+) ON (\w+) \([^)]*\) WHERE (.*);$`)
	found := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(up, -1) {
		found[m[1]] = m[3]
		want, ok := store.OpenIndexPredicates[m[1]]
		if !ok {
			t.Errorf("partial index %s has no predicate in the store", m[1])
			continue
		}
		if m[3] != want {
			t.Errorf("index %s is declared WHERE %s, its queries carry %s", m[1], m[3], want)
		}
	}
	for name := range store.OpenIndexPredicates {
		if _, ok := found[name]; !ok {
			t.Errorf("the migration does not create %s", name)
		}
	}

	// Proposals: the one status that waits for a reviewer.
	var pending []string
	for _, s := range models.AllStatuses {
		if s.Pending() {
			pending = append(pending, string(s))
		}
	}
	if got := quoted(store.AwaitingProposal); !slices.Equal(got, pending) {
		t.Errorf("awaiting proposals are %v, the pending statuses %v", got, pending)
	}
	// Tokens: the one status from which a token may still be redeemed
	// or expire.
	if got := quoted(store.IssuedToken); !slices.Equal(got, []string{string(models.TokenIssued)}) {
		t.Errorf("issued tokens are %v", got)
	}
	// Executions: every status an execution can reach from executing
	// that a transition leaves.
	reach := map[models.Status]bool{models.StatusExecuting: true}
	for changed := true; changed; {
		changed = false
		for from := range reach {
			for _, to := range models.AllStatuses {
				if models.CanTransition(from, to) && !reach[to] && to.Executable() {
					reach[to], changed = true, true
				}
			}
		}
	}
	var open []string
	for _, s := range models.AllStatuses {
		if reach[s] && !s.Terminal() {
			open = append(open, string(s))
		}
	}
	got := quoted(store.OpenExecution)
	if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(open))) {
		t.Errorf("open executions are %v, the execution statuses that are not terminal %v", got, open)
	}
}

// TestOpenIndexesMigrateDownAndUp: the migration's Down restores the
// indexes it replaced, and Up again puts the partial ones back, with the
// predicate text the queries carry (SQLite keeps the text as written).
func TestOpenIndexesMigrateDownAndUp(t *testing.T) {
	t.Parallel()
	old := []string{"proposals_status_expires", "proposals_agent_status", "proposals_tenant_status_expires",
		"tokens_status_expires", "executions_status_lease"}
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		has := func(name string) bool {
			table, col := "sqlite_master", "name"
			if st.Dialect() == store.Postgres {
				table, col = "pg_indexes", "indexname"
			}
			v, err := st.ValueForTest(ctx, table, col, col+" = ?", name)
			return err == nil && v == name
		}
		check := func(when string, present, absent []string) {
			for _, n := range present {
				if !has(n) {
					t.Errorf("%s: index %s is missing", when, n)
				}
			}
			for _, n := range absent {
				if has(n) {
					t.Errorf("%s: index %s is still there", when, n)
				}
			}
		}
		var partial []string
		for n := range store.OpenIndexPredicates {
			partial = append(partial, n)
		}
		check("up", partial, old)
		if err := st.MigrateDownTo(ctx, 19); err != nil {
			t.Fatal(err)
		}
		check("down", old, partial)
		if _, err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		check("up again", partial, old)
		if st.Dialect() == store.SQLite {
			for n, pred := range store.OpenIndexPredicates {
				def, err := st.ValueForTest(ctx, "sqlite_master", "sql", "name = ?", n)
				if err != nil || !strings.HasSuffix(def, " WHERE "+pred) {
					t.Errorf("index %s is %q (%v), want it WHERE %s", n, def, err, pred)
				}
			}
		}
	})
}

// TestOpenQueriesUseOpenIndexes checks, on both databases, the plans of
// the statements the store really runs (as the driver receives them) for
// the sweeps, the open-proposal limit, the operational numbers and the
// reconciler: each reads its table through the partial index of open rows,
// never by a full scan. A query that lost the index's predicate text would
// fall back to a scan of the whole history here.
func TestOpenQueriesUseOpenIndexes(t *testing.T) {
	t.Parallel()
	eachDBURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		now := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)
		st := openRecording(t, url, now)
		d := seed(t, st.Store)
		pk := func(table string) string {
			if st.Dialect() == store.Postgres {
				name, err := st.ValueForTest(ctx, "pg_indexes", "indexname", "tablename = ? AND indexname LIKE '%_pkey'", table)
				if err != nil {
					t.Fatal(err)
				}
				return name
			}
			return "sqlite_autoindex_" + table + "_1"
		}
		// On tables of a few rows the planner may pick any index that
		// serves the query equally well; each of these holds open rows
		// only (or finds one row by its key).
		awaiting := []string{"proposals_awaiting_expires", "proposals_agent_awaiting", "proposals_tenant_awaiting_expires"}
		type read struct {
			table, alias string
			indexes      []string // one of them
		}
		cases := []struct {
			name  string
			call  func() error
			match string // the statements checked contain this
			reads []read // and read these tables through these indexes
		}{
			{"expiry sweep, proposals awaiting", func() error {
				_, err := st.ExpireDue(ctx, "", "", now)
				return err
			}, store.AwaitingProposal + " AND expires_at <=", []read{{"proposals", "", awaiting}}},
			{"expiry sweep, tokens issued", func() error {
				_, err := st.ExpireDue(ctx, "", "", now)
				return err
			}, store.IssuedToken + " AND expires_at <=", []read{{"tokens", "", []string{"tokens_issued_expires"}}}},
			{"expiry sweep, failed attempts", func() error {
				_, err := st.ExpireDue(ctx, "", "", now)
				return err
			}, store.OpenExecution + " AND status =", []read{{"executions", "", []string{"executions_open_lease"}}, {"tokens", "t", []string{pk("tokens")}}}},
			// Expiry on read, for one proposal, finds its rows by their
			// keys (or, on these tiny tables, maybe through the open
			// rows); never by a scan.
			{"expiry on read", func() error {
				_, err := st.ExpireDue(ctx, d.Tenant.ID, "prop_none", now)
				return err
			}, "expires_at <=", nil},
			{"open proposals of an agent", func() error {
				p := &models.Proposal{ID: "prop_lim", TenantID: d.Tenant.ID, AgentID: d.Agent.ID,
					Tool: "refund_order", Arguments: []byte(`{}`), ArgsDigest: "sha256:00", Resource: "ord_1001",
					Tier:          models.Tier{Name: "low", Confirmation: models.ConfirmClick, Quorum: 1, TTL: time.Hour},
					PolicyVersion: "1", RequestKey: "k-lim", Status: models.StatusAwaitingConfirmation,
					Revision: 1, CreatedAt: now, ExpiresAt: now.Add(time.Hour), UpdatedAt: now}
				_, _, err := st.CreateProposalWithin(ctx, p, 5)
				return err
			}, store.AwaitingProposal + " AND expires_at >", []read{{"proposals", "", awaiting}}},
			{"oldest pending", func() error {
				_, err := st.Stats(ctx, now)
				return err
			}, "MIN(created_at)", []read{{"proposals", "", awaiting}}},
			{"unsettled executions", func() error {
				_, err := st.Stats(ctx, now)
				return err
			}, "FROM " + quoteFor(st.Store, "executions"), []read{{"executions", "", []string{"executions_open_lease"}}}},
			{"reconciler", func() error {
				_, err := st.ExecutionsDue(ctx, now, 10)
				return err
			}, store.OpenExecution + " AND status IN", []read{{"executions", "", []string{"executions_open_lease"}}}},
			// The claim finds its execution by key (on tables this small,
			// PostgreSQL's generic plan may pick the tenant's unique key
			// instead), and that execution's token by its key too: it
			// does not collect the tenant's redeemed tokens first.
			{"retry claim", func() error {
				_, _, err := st.ClaimRetry(ctx, d.Tenant.ID, "exe_none", now, now.Add(time.Minute))
				return err
			}, "UPDATE " + quoteFor(st.Store, "executions"), []read{{"tokens", "t", []string{pk("tokens")}}}},
			{"pending by time left (console)", func() error {
				_, _, err := st.ListProposals(ctx, store.ListFilter{TenantID: d.Tenant.ID,
					Statuses: []models.Status{models.StatusAwaitingConfirmation}, Order: store.ListExpiring})
				return err
			}, "p." + store.AwaitingProposal, []read{{"proposals", "p", []string{"proposals_tenant_awaiting_expires"}}}},
		}
		for _, tc := range cases {
			ran := st.ran(t, tc.name, tc.call)
			checked := 0
			for _, q := range ran {
				if !strings.Contains(q.sql, tc.match) || strings.HasPrefix(q.sql, "EXPLAIN") {
					continue
				}
				checked++
				plan, err := st.ExplainGeneric(ctx, q.sql, q.args...)
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				text := strings.Join(plan, "\n")
				for _, r := range tc.reads {
					if !slices.ContainsFunc(r.indexes, func(index string) bool { return usesIndex(plan, r.table, r.alias, index) }) {
						t.Errorf("%s: %s is not read through %v:\n%s\n%s", tc.name, r.table, r.indexes, q.sql, text)
					}
				}
				for _, line := range plan {
					l := strings.TrimLeft(line, "-> ")
					if strings.HasPrefix(l, "SCAN ") || strings.HasPrefix(l, "Seq Scan") {
						t.Errorf("%s: a table is scanned:\n%s\n%s", tc.name, q.sql, text)
					}
				}
				t.Logf("%s: %s %v\n%s", tc.name, q.sql, q.args, text)
			}
			if checked == 0 {
				t.Errorf("%s: no statement contains %q: %q", tc.name, tc.match, ran)
			}
		}
	})
}

// quoteFor quotes a table name the way the store's statements do.
func quoteFor(st *store.Store, table string) string {
	if st.Dialect() == store.Postgres {
		return `"` + table + `"`
	}
	return "`" + table + "`"
}

// usesIndex reports whether a plan reads table (named alias in the
// statement, or "") through index: SQLite's "SEARCH alias|table [EXISTS]
// USING [COVERING] INDEX index (…)", PostgreSQL's "… Scan using index on
// table [alias]" or "Bitmap Index Scan on index" over "Bitmap Heap Scan on
// table".
func usesIndex(plan []string, table, alias, index string) bool {
	name := table
	if alias != "" {
		name = alias
	}
	for i, line := range plan {
		l := strings.TrimLeft(line, "-> ")
		if strings.HasPrefix(l, "SEARCH "+name+" ") && (strings.Contains(l, "INDEX "+index+" ") || strings.HasSuffix(l, "INDEX "+index)) ||
			strings.Contains(l, "using "+index+" on "+table+" ") ||
			strings.HasPrefix(l, "Bitmap Index Scan on "+index+" ") && slices.ContainsFunc(plan[:i], func(above string) bool {
				return strings.Contains(above, "Bitmap Heap Scan on "+table+" ")
			}) {
			return true
		}
	}
	return false
}

// TestSweepsFindEveryOpenRow checks each query moved onto a partial index
// against the rows it must find, on both databases: a row in each open
// status is found and acted on, one in every other status (settled) is
// not. The expiry sweep (proposals, tokens, failed attempts), the
// open-proposal limit, the reconciler and the operational numbers.
func TestSweepsFindEveryOpenRow(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		d := seed(t, st)
		now := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
		ms := func(t time.Time) int64 { return t.UnixMilli() }
		propose := func(id string, s models.Status, created, expires time.Time) {
			t.Helper()
			p := &models.Proposal{ID: id, TenantID: d.Tenant.ID, AgentID: d.Agent.ID,
				Tool: "refund_order", Arguments: []byte(`{}`), ArgsDigest: "sha256:00", Resource: "ord_1001",
				Tier:          models.Tier{Name: "low", Confirmation: models.ConfirmClick, Quorum: 1, TTL: time.Hour},
				PolicyVersion: "1", RequestKey: "k-" + id, Status: s,
				Revision: 1, CreatedAt: created, ExpiresAt: expires, UpdatedAt: created}
			if _, ok, err := st.CreateProposal(ctx, p); err != nil || !ok {
				t.Fatalf("create %s: %v", id, err)
			}
		}
		exec := func(q string, args ...any) {
			t.Helper()
			if err := st.Exec(ctx, q, args...); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		value := func(table, col, id string) string {
			t.Helper()
			key := "id"
			if table == "tokens" {
				key = "jti"
			}
			v, err := st.ValueForTest(ctx, table, col, key+" = ?", id)
			if err != nil {
				t.Fatalf("%s %s: %v", table, id, err)
			}
			return v
		}

		// Proposals in every status, all past their expiry; the one
		// awaiting confirmation was created last, so that the oldest
		// pending is its creation time only if the others are left out.
		for i, s := range models.AllStatuses {
			created := now.Add(-2 * time.Hour)
			if s == models.StatusAwaitingConfirmation {
				created = now.Add(-time.Hour)
			}
			propose(fmt.Sprintf("prop_p%02d", i), s, created, now.Add(-time.Minute+time.Duration(i)*time.Millisecond))
		}
		// Tokens in every status, all past their expiry, each on a
		// confirmed proposal (a sweep that took a token not issued would
		// expire its proposal).
		tokenStatuses := []models.TokenStatus{models.TokenIssued, models.TokenConsumed, models.TokenRevoked, models.TokenExpired}
		for i, s := range tokenStatuses {
			id := fmt.Sprintf("prop_t%d", i)
			propose(id, models.StatusConfirmed, now.Add(-2*time.Hour), now.Add(time.Hour))
			exec(`INSERT INTO tokens (jti, tenant_id, proposal_id, agent_id, kid, status, compact, issued_at, expires_at)
				VALUES (?, ?, ?, ?, 'k', ?, 'a.b.c', ?, ?)`,
				fmt.Sprintf("tok_t%d", i), d.Tenant.ID, id, d.Agent.ID, string(s), ms(now.Add(-time.Hour)), ms(now.Add(-time.Second)))
		}
		// Executions in every status, each with its lease run out and its
		// token expired, on a proposal in the same status.
		execStatuses := []models.Status{models.StatusExecuting, models.StatusSucceeded, models.StatusFailedRetryable,
			models.StatusFailedTerminal, models.StatusUnknown}
		for i, s := range execStatuses {
			id := fmt.Sprintf("prop_e%d", i)
			propose(id, s, now.Add(-2*time.Hour), now.Add(time.Hour))
			jti := fmt.Sprintf("tok_e%d", i)
			exec(`INSERT INTO tokens (jti, tenant_id, proposal_id, agent_id, kid, status, compact, issued_at, expires_at)
				VALUES (?, ?, ?, ?, 'k', 'consumed', 'a.b.c', ?, ?)`,
				jti, d.Tenant.ID, id, d.Agent.ID, ms(now.Add(-time.Hour)), ms(now.Add(-time.Second)))
			exec(`INSERT INTO executions (id, tenant_id, proposal_id, token_jti, request_key, operation, args_digest, status,
				lease_until, created_at, updated_at, downstream_key)
				VALUES (?, ?, ?, ?, ?, 'refund_order', 'sha256:00', ?, ?, ?, ?, ?)`,
				fmt.Sprintf("exe_e%d", i), d.Tenant.ID, id, jti, "rk-"+id, string(s), ms(now.Add(-time.Second)),
				ms(now.Add(-time.Hour)), ms(now.Add(-time.Hour))+int64(i), "dk-"+id)
		}

		// The operational numbers count the open rows only.
		stats, err := st.Stats(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		if !stats.OldestPending.Equal(now.Add(-time.Hour)) {
			t.Errorf("oldest pending = %v, want %v", stats.OldestPending, now.Add(-time.Hour))
		}
		wantExecs := map[models.Status]int64{models.StatusExecuting: 1, models.StatusFailedRetryable: 1, models.StatusUnknown: 1}
		if fmt.Sprint(stats.Executions) != fmt.Sprint(wantExecs) || stats.ReconcileDue != 2 {
			t.Errorf("executions %v, due %d; want %v, due 2", stats.Executions, stats.ReconcileDue, wantExecs)
		}

		// The reconciler finds the executing and the unknown execution.
		due, err := st.ExecutionsDue(ctx, now, 10)
		if err != nil {
			t.Fatal(err)
		}
		var dueIDs []string
		for _, e := range due {
			dueIDs = append(dueIDs, e.ID)
		}
		if want := []string{"exe_e0", "exe_e4"}; !slices.Equal(dueIDs, want) {
			t.Errorf("executions due %v, want %v", dueIDs, want)
		}

		// The sweep expires the proposal awaiting confirmation, the issued
		// token (and its proposal) and the failed attempt whose token ran
		// out, and nothing else.
		refs, err := st.ExpireDueRefs(ctx, "", "", now)
		if err != nil {
			t.Fatal(err)
		}
		var expired []string
		for _, r := range refs {
			expired = append(expired, r.ID)
		}
		slices.Sort(expired)
		awaitingID := fmt.Sprintf("prop_p%02d", slices.Index(models.AllStatuses, models.StatusAwaitingConfirmation))
		if want := []string{"prop_e2", awaitingID, "prop_t0"}; !slices.Equal(expired, want) {
			t.Errorf("expired %v, want %v", expired, want)
		}
		for i, s := range models.AllStatuses {
			id := fmt.Sprintf("prop_p%02d", i)
			want := string(s)
			if id == awaitingID {
				want = string(models.StatusExpired)
			}
			if got := value("proposals", "status", id); got != want {
				t.Errorf("proposal %s: %s, want %s", id, got, want)
			}
		}
		for i, s := range tokenStatuses {
			want, wantP := string(s), string(models.StatusConfirmed)
			if s == models.TokenIssued {
				want, wantP = string(models.TokenExpired), string(models.StatusExpired)
			}
			if got := value("tokens", "status", fmt.Sprintf("tok_t%d", i)); got != want {
				t.Errorf("token in %s: %s, want %s", s, got, want)
			}
			if got := value("proposals", "status", fmt.Sprintf("prop_t%d", i)); got != wantP {
				t.Errorf("proposal of the token in %s: %s, want %s", s, got, wantP)
			}
		}
		for i, s := range execStatuses {
			want := string(s)
			if s == models.StatusFailedRetryable {
				want = string(models.StatusFailedTerminal)
			}
			if got := value("executions", "status", fmt.Sprintf("exe_e%d", i)); got != want {
				t.Errorf("execution in %s: %s, want %s", s, got, want)
			}
		}

		// The open-proposal limit counts the proposals awaiting
		// confirmation, not the agent's history: with one awaiting (in
		// time) and the rest settled, a limit of 2 admits one more and
		// then refuses.
		propose("prop_open", models.StatusAwaitingConfirmation, now, now.Add(time.Hour))
		for i := range 2 {
			p := &models.Proposal{ID: fmt.Sprintf("prop_lim%d", i), TenantID: d.Tenant.ID, AgentID: d.Agent.ID,
				Tool: "refund_order", Arguments: []byte(`{}`), ArgsDigest: "sha256:00", Resource: "ord_1001",
				Tier:          models.Tier{Name: "low", Confirmation: models.ConfirmClick, Quorum: 1, TTL: time.Hour},
				PolicyVersion: "1", RequestKey: fmt.Sprintf("k-lim%d", i), Status: models.StatusAwaitingConfirmation,
				Revision: 1, CreatedAt: now, ExpiresAt: now.Add(time.Hour), UpdatedAt: now}
			_, _, err := st.CreateProposalWithin(ctx, p, 2)
			if i == 0 && err != nil {
				t.Errorf("the second open proposal was refused: %v", err)
			}
			if i == 1 && !models.IsCode(err, models.ERateLimited) {
				t.Errorf("the third open proposal: %v, want rate_limited", err)
			}
		}
	})
}
