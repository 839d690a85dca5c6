package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/testenv"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A small run against two in-process servers over one database, with
// duplicate proposes and executes and business-system faults, finds no
// duplicate effect and no lost write, and says so in its summary.
func TestSmallRunHasNoDuplicatesAndNoLostWrites(t *testing.T) {
	testenv.SkipShort(t, "a load run (two servers, faults, reconciliation)")
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			cfg := config{Servers: 2, Agents: 3, Proposals: 3, Reviewers: 2, Duplicates: 0.5, BizFaults: 0.3,
				Seed: 7, Timeout: 2 * time.Minute}
			if kind == "postgres" {
				cfg.DB = pgtest.DSN(t)
			}
			rep, err := load(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			rep.print(&out)
			t.Log("\n" + out.String())
			if rep.DuplicateEffects != 0 || rep.Lost != 0 || rep.Mismatched != 0 || rep.Unsettled != 0 {
				t.Fatalf("duplicates %d, lost %d, mismatched %d, unsettled %d",
					rep.DuplicateEffects, rep.Lost, rep.Mismatched, rep.Unsettled)
			}
			if got, want := rep.Succeeded, 9; got != want {
				t.Fatalf("succeeded = %d, want %d; errors %v", got, want, rep.Errors)
			}
			if got, want := rep.Writes, 9; got != want {
				t.Fatalf("business writes = %d, want %d", got, want)
			}
			// The duplicates were really sent, and each second execute was
			// answered already_consumed.
			if rep.DupPropose == 0 || rep.DupExecute == 0 || rep.AlreadyConsumed < rep.DupExecute {
				t.Fatalf("duplicates sent: propose %d, execute %d, already_consumed %d",
					rep.DupPropose, rep.DupExecute, rep.AlreadyConsumed)
			}
			if len(rep.Errors) != 0 {
				t.Fatalf("errors: %v", rep.Errors)
			}
			for _, want := range []string{"duplicate effects 0, lost 0", "proposals 9, approved 9, succeeded 9"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("summary lacks %q", want)
				}
			}
		})
	}
}

// The flags reach the configuration and a bad share is refused.
func TestRunRefusesBadShares(t *testing.T) {
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"--duplicates", "1.5"}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "between 0 and 1") {
		t.Fatalf("err = %v", err)
	}
}
