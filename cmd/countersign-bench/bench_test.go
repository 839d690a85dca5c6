package main

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/testenv"
)

func TestMain(m *testing.M) {
	waiterClientMain() // the child process of the waiter measurement
	pgtest.Main(m)
}

// TestBenchReport runs the benchmark in a tiny configuration and checks
// that the report has every row, each with a finite, positive ratio. It
// asserts nothing about speed.
func TestBenchReport(t *testing.T) {
	testenv.SkipShort(t, "a benchmark run")
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			args := []string{"--ops", "8", "--rounds", "2", "-c", "1,3", "--list-n", "1500", "--waiters", "12", "--dir", t.TempDir()}
			if kind == "postgres" {
				// The sign-in row does not depend on the database.
				args = append(args, "--pg", pgtest.DSN(t), "--skip-sqlite", "--sign-ins=false")
			}
			var out, errs bytes.Buffer
			if err := run(context.Background(), args, &out, &errs); err != nil {
				t.Fatalf("run: %v\n%s", err, errs.String())
			}
			names := []string{
				"execute, " + kind + ", c=1", "execute, " + kind + ", c=3",
				"execute floor through HTTP, " + kind + ", c=1", "execute floor through HTTP, " + kind + ", c=3",
				"create, " + kind + ", c=1", "create, " + kind + ", c=3",
				"create floor through HTTP, " + kind + ", c=1", "create floor through HTTP, " + kind + ", c=3",
				"status-filtered list (API), " + kind + ", 1k vs 1500 stored",
				"console pending list, " + kind + ", 1k vs 1500 stored",
				"console history, " + kind + ", 1k vs 1500 stored",
				"console history by a rare target, " + kind + ", 1k vs 1500 stored",
				"audit log page (console, API), " + kind + ", 1k vs 1500 stored",
				"proposal audit trail (console), " + kind + ", 1k vs 1500 stored",
				"execute while one agent re-lists, " + kind + ", 1500 stored",
				"long-poll waiters, " + kind + ", 12 at once",
			}
			if kind == "sqlite" {
				names = append(names, "50 concurrent sign-ins (argon2id, 64 MiB each)")
			}
			for _, name := range names {
				line := ""
				for _, l := range strings.Split(out.String(), "\n") {
					if strings.HasPrefix(l, "| "+name+" |") {
						line = l
					}
				}
				if line == "" {
					t.Errorf("no row %q in the report:\n%s", name, out.String())
					continue
				}
				if strings.Contains(line, "NaN") || strings.Contains(line, "Inf") {
					t.Errorf("row %q has a ratio that is not finite: %s", name, line)
				}
			}
			// Each execute and create row says what one operation cost
			// besides its time; on PostgreSQL, the log it wrote too.
			for _, op := range []string{"execute", "create"} {
				for _, c := range []string{"1", "3"} {
					prefix := "Per " + op + ", " + kind + ", c=" + c + ": CPU of the bench's process, countersign "
					note := ""
					for _, l := range strings.Split(out.String(), "\n") {
						if strings.HasPrefix(l, prefix) {
							note = l
						}
					}
					switch {
					case note == "":
						t.Errorf("no note %q in the report:\n%s", prefix, out.String())
					case strings.Contains(note, "NaN") || strings.Contains(note, "Inf") || strings.Contains(note, " 0.00 ms"):
						t.Errorf("a cost that is not finite and positive: %s", note)
					case kind == "postgres" && !strings.Contains(note, "; write-ahead log written, countersign "):
						t.Errorf("no log volume on PostgreSQL: %s", note)
					case kind == "sqlite" && strings.Contains(note, "write-ahead log"):
						t.Errorf("a PostgreSQL log volume on SQLite: %s", note)
					}
				}
			}
			rep, err := bench(context.Background(), config{Conc: []int{2}, Ops: 4, Rounds: 1, ListN: 1000, Waiters: 3,
				Dir: t.TempDir(), PG: pgDSN(t, kind), SkipSQLite: kind == "postgres"})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.rows) != 12 {
				t.Fatalf("report has %d rows, want 12: %+v", len(rep.rows), rep.rows)
			}
			for _, r := range rep.rows {
				for _, v := range []float64{r.Ratio, r.Ratio2} {
					if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || (v == 0 && r.Ratio2Of != "") {
						t.Errorf("row %q: ratio %v is not finite and positive", r.Name, v)
					}
				}
				if r.Ratio <= 0 {
					t.Errorf("row %q: ratio %v", r.Name, r.Ratio)
				}
			}
		})
	}
}

func pgDSN(t *testing.T, kind string) string {
	if kind != "postgres" {
		return ""
	}
	return pgtest.DSN(t)
}
