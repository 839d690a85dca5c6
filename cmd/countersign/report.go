package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// report prints err for a person on w and returns the exit status: 0 for
// nil, 2 for a usage error, 1 for anything else. A domain error prints as
// "error: <code>: <message>" followed by its field problems, one per line,
// so that scripts can match the code; internal and unavailable errors add
// their cause, which the operator needs and the API never shows.
func report(w io.Writer, err error) int {
	if err == nil || errors.Is(err, errHelp) {
		return exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(w, "error: %s\n", ue.msg)
		if ue.usage != "" {
			fmt.Fprintf(w, "usage: %s\n", ue.usage)
			fmt.Fprintf(w, "Run '%s -h' for help.\n", commandPath(ue.usage))
		} else {
			fmt.Fprintln(w, "Run 'countersign help' for the commands.")
		}
		return exitUsage
	}
	// Stored keys the key-encryption key given does not open: the
	// operator's setting to fix, whatever layer wrapped it (the store
	// calls it a database error, as it is to a request).
	var ke *store.KeyError
	if errors.As(err, &ke) {
		fmt.Fprintf(w, "error: %s: %s\n", models.EUnauthenticated, ke.Error())
		return exitError
	}
	var me *models.Error
	if errors.As(err, &me) {
		fmt.Fprintf(w, "error: %s: %s\n", me.Code, me.Message)
		for _, f := range me.Fields {
			if f.Pointer != "" {
				fmt.Fprintf(w, "  %s: %s\n", f.Pointer, f.Message)
			} else {
				fmt.Fprintf(w, "  - %s\n", f.Message)
			}
		}
		if me.Err != nil && (me.Code == models.EInternal || me.Code == models.EUnavailable) {
			fmt.Fprintf(w, "  cause: %v\n", me.Err)
		}
		return exitError
	}
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(w, "error: interrupted")
		return exitError
	}
	fmt.Fprintf(w, "error: %s: %v\n", plainCode(err), err)
	return exitError
}

// commandPath is the command part of a synopsis: the words before the first
// argument placeholder or flag ("countersign tenant create").
func commandPath(synopsis string) string {
	var words []string
	for w := range strings.FieldsSeq(synopsis) {
		if strings.ContainsAny(w[:1], "-[{") || strings.ToUpper(w) == w {
			break
		}
		words = append(words, w)
	}
	return strings.Join(words, " ")
}

// plainCode is the code printed for an error the domain did not give one:
// a file that is missing, in the way or not allowed, or else input that
// cannot be used as given (a password too short, a file that is not what
// the command needs).
func plainCode(err error) models.Code {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return models.ENotFound
	case errors.Is(err, fs.ErrExist):
		return models.EAlreadyExists
	case errors.Is(err, fs.ErrPermission):
		return models.EForbidden
	}
	return models.EInvalidRequest
}
