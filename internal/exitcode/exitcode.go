// Package exitcode is how the commands of the maka executables end: an
// error that carries the process exit code, a command's flag error, and
// the one function that prints a command's error and picks its code.
package exitcode

import (
	"errors"
	"fmt"
	"io"
)

// Error ends a command with Code; Err is printed unless its text is empty
// (the command has already said what happened).
type Error struct {
	Code int
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Errorf is an Error with Code and a formatted message.
func Errorf(code int, format string, args ...any) error {
	return &Error{Code: code, Err: fmt.Errorf(format, args...)}
}

// FlagError is a flag parsing error of Command (as the user types it).
type FlagError struct {
	Command string
	Err     error
}

func (e *FlagError) Error() string { return e.Err.Error() }
func (e *FlagError) Unwrap() error { return e.Err }

// Code prints err to stderr and returns the exit code: 0 for nil, an
// Error's Code, else 2 (a usage error), with a pointer to the --help of
// the FlagError's command, else of help.
func Code(err error, stderr io.Writer, help string) int {
	if err == nil {
		return 0
	}
	var ee *Error
	if errors.As(err, &ee) {
		if ee.Err != nil && ee.Err.Error() != "" {
			fmt.Fprintln(stderr, "maka:", ee.Err)
		}
		return ee.Code
	}
	fmt.Fprintln(stderr, "maka:", err) // cobra usage errors (unknown flag, wrong arguments)
	var fe *FlagError
	if errors.As(err, &fe) {
		help = fe.Command
	}
	fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", help)
	return 2
}
