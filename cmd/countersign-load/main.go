// Command countersign-load drives countersign the way production does and
// checks that no write happened twice and none was lost.
//
// Agents propose refunds through the API (each against an order of its
// own), reviewers sign in to the console and approve through its forms
// (sign-in and CSRF tokens included), agents execute their tokens and wait
// for the outcome. Duplicates are injected on purpose: proposes sent twice
// with the same request key, executes sent twice at once to different
// servers, and every request that got no answer sent again. The reference
// business system (models/adapters/adaptertest) runs on loopback with
// injectable faults (slow answers, HTTP 500, connections dropped after the
// write) and counts what was applied. With --kill the servers are
// `countersign serve` child processes over one database, SIGKILLed at
// random and restarted.
//
// The report counts duplicate effects (writes beyond the first for one
// proposal), lost writes (approved, never applied, no failure reported),
// mismatches and latencies. The exit status is 1 when any of them is
// non-zero or a proposal did not succeed.
//
//	countersign-load --servers 3 --agents 8 --proposals 25 --duplicates 0.3 --biz-faults 0.2 --kill
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "countersign-load:", err)
		os.Exit(1)
	}
}

var errFound = errors.New("the run found duplicates, lost writes or unfinished proposals")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg config
	var verbose bool
	fs := flag.NewFlagSet("countersign-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.DB, "db", "", "database `URL` (sqlite://PATH or postgres://...); a fresh SQLite file when empty")
	fs.IntVar(&cfg.Servers, "servers", 2, "countersign servers over the one database")
	fs.IntVar(&cfg.Agents, "agents", 4, "concurrent agents")
	fs.IntVar(&cfg.Proposals, "proposals", 5, "proposals per agent")
	fs.IntVar(&cfg.Reviewers, "reviewers", 2, "concurrent reviewers approving in the console")
	fs.Float64Var(&cfg.Duplicates, "duplicates", 0.3, "share of proposes and executes sent twice on purpose (0..1)")
	fs.Float64Var(&cfg.BizFaults, "biz-faults", 0, "share of business-system executes that are slow, fail with 500 or drop the connection after the write (0..1)")
	fs.BoolVar(&cfg.Kill, "kill", false, "run the servers as `countersign serve` child processes, SIGKILL them at random and restart them")
	fs.DurationVar(&cfg.KillEvery, "kill-every", 0, "mean time between kills with --kill (default 3s)")
	fs.StringVar(&cfg.Bin, "bin", "", "countersign binary for --kill; built with `go build` when empty")
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "bound of the whole run (default 5m)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the random choices (agents, faults, kills)")
	fs.BoolVar(&verbose, "v", false, "show server logs and build output on stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if verbose {
		cfg.Log = stderr
	}
	rep, err := load(ctx, cfg)
	if err != nil {
		return err
	}
	rep.print(stdout)
	if !rep.ok() {
		return errFound
	}
	return nil
}
