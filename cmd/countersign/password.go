package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/countersign/countersign/internal/secret"
)

// readPassword returns the first line of stdin without its line ending. On a
// terminal it prompts on stderr and turns echo off while the line is typed.
// It does not judge the password; callers do (an empty one included). It
// returns ctx's error when ctx ends first (Ctrl-C while waiting for input).
func (c *cli) readPassword(ctx context.Context, prompt string) (string, error) {
	if f, ok := c.stdin.(*os.File); ok && isTerminal(f) {
		fmt.Fprint(c.stderr, prompt)
		if restore, err := echoOff(f); err == nil {
			defer func() {
				restore()
				fmt.Fprintln(c.stderr) // the Enter that was not echoed
			}()
		} else {
			fmt.Fprint(c.stderr, "(the input is echoed) ")
		}
	}
	return readLine(ctx, c.stdin)
}

// readNewPassword is readPassword for a password being set: on a terminal
// it is asked for twice, since a typo would go unseen.
func (c *cli) readNewPassword(ctx context.Context, user string) (string, error) {
	pw, err := c.readPassword(ctx, fmt.Sprintf("New password for %s: ", user))
	if err != nil {
		return "", err
	}
	if f, ok := c.stdin.(*os.File); ok && isTerminal(f) {
		again, err := c.readPassword(ctx, "Repeat it: ")
		if err != nil {
			return "", err
		}
		if again != pw {
			return "", errors.New("the two passwords differ")
		}
	}
	return pw, nil
}

// readLine reads one line, at most one byte longer than the longest password
// any caller accepts, so that a longer one is refused rather than cut.
func readLine(ctx context.Context, r io.Reader) (string, error) {
	type result struct {
		line string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		br := bufio.NewReader(io.LimitReader(r, secret.MaxPasswordLen+3))
		line, err := br.ReadString('\n')
		if errors.Is(err, io.EOF) {
			err = nil // a last line without a newline is a line
		}
		done <- result{strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r"), err}
	}()
	select {
	case res := <-done:
		if res.err != nil {
			return "", fmt.Errorf("reading the password from stdin: %w", res.err)
		}
		return res.line, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}
