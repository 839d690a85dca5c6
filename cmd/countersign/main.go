// Command countersign serves the countersign approval API and reviewer
// console, and administers its database: tenants, reviewers, agent keys,
// signing keys, and reviewers' decisions from a terminal (for the tiers that
// allow one).
//
// Run "countersign help" for the commands and "countersign COMMAND -h" for a
// command's flags. Everything happens in run, so that tests drive the same
// code with their own arguments, environment and streams.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(report(os.Stderr, err))
}
