// Command countersign-bench measures countersign against the floor of the
// work it has to do, side by side in one run on a fresh database.
//
// The floor of an execute is the same durable work issued directly with
// database/sql: verify an Ed25519-signed token, consume it with one
// conditional UPDATE, write the business row and the execution record, all
// in one transaction, over a connection opened with the same SQLite pragmas
// (or the same PostgreSQL). The product is an execute through HTTP against
// the real server internal/app builds: JSON, agent authentication, token
// verification, the protocol and the demo ledger's write. Both run
// interleaved, batch by batch, at each concurrency, so machine noise hits
// both alike; the report gives their ratio. Create is measured the same way
// against its own floor (schema validation, normalization, digest, one
// INSERT).
//
// Two more measurements need no floor of their own: how a status-filtered
// list grows from 1,000 stored proposals to --list-n (bulk-inserted with
// SQL), and what --waiters concurrent ?wait=60 long-polls cost (memory per
// waiter, CPU while nothing changes, and the time from an approval to the
// waiter's answer, against a single waiter's).
//
//	countersign-bench                          # SQLite, default sizes
//	countersign-bench --pg postgres://localhost/postgres --list-n 1000000 --waiters 5000
//
// Performance is only ever reported as a ratio to a baseline measured in the
// same run: absolute numbers depend on the machine.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
)

func main() {
	waiterClientMain()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "countersign-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		cfg        config
		conc       string
		cpuProfile string
	)
	fs := flag.NewFlagSet("countersign-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.PG, "pg", "", "PostgreSQL `DSN` of a server to also measure on; a fresh database is created there and dropped afterwards")
	fs.StringVar(&cfg.Dir, "dir", "", "directory for the SQLite files (a temporary one when empty)")
	fs.StringVar(&conc, "c", "1,4,16", "concurrencies, comma-separated")
	fs.IntVar(&cfg.Ops, "ops", 300, "operations per batch")
	fs.IntVar(&cfg.Rounds, "rounds", 3, "interleaved floor/product batches per concurrency (the report gives medians)")
	fs.IntVar(&cfg.ListN, "list-n", 20000, "stored proposals for the list growth measurement (compared with 1,000)")
	fs.IntVar(&cfg.Waiters, "waiters", 1000, "concurrent ?wait=60 long-polls (0 skips)")
	fs.BoolVar(&cfg.SkipSQLite, "skip-sqlite", false, "measure only PostgreSQL (needs --pg)")
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to `file`")
	fs.BoolVar(&cfg.SignIns, "sign-ins", true, "measure the peak memory of 50 concurrent sign-ins (default password costs)")
	fs.StringVar(&cfg.MemProfile, "memprofile", "", "write a heap profile to `file` while the waiters are parked, and `file`.base just before they are")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, f := range strings.Split(conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-c: %q is not a positive number", f)
		}
		cfg.Conc = append(cfg.Conc, n)
	}
	if cfg.Ops < 1 || cfg.Rounds < 1 || cfg.ListN < 1000 || cfg.Waiters < 0 {
		return errors.New("--ops and --rounds must be positive, --list-n at least 1000 and --waiters not negative")
	}
	if cfg.SkipSQLite && cfg.PG == "" {
		return errors.New("--skip-sqlite needs --pg")
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if cfg.MemProfile != "" {
		runtime.MemProfileRate = 512 // fine enough to attribute a few KiB per waiter
	}
	cfg.Log = stderr
	rep, err := bench(ctx, cfg)
	if err != nil {
		return err
	}
	rep.print(stdout)
	return nil
}
