//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package main

import (
	"errors"
	"os"
)

// isTerminal reports false: without terminal control the password is read
// like any other input (pipe it in).
func isTerminal(*os.File) bool { return false }

func echoOff(*os.File) (func(), error) { return nil, errors.New("echo control is not supported here") }
