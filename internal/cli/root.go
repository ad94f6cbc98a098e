// Package cli implements the maka command line.
package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

// Version is the maka version, set at build time with
// -ldflags "-X github.com/maka-agent/maka/internal/cli.Version=...".
var Version = "0.1.0-dev"

// exitError carries a process exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitf returns an error that makes maka exit with code.
func exitf(code int, format string, args ...any) error {
	return &exitError{code: code, err: fmt.Errorf(format, args...)}
}

// Main runs maka with args and returns the process exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCommand(stdin, stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.err.Error() != "" {
			fmt.Fprintln(stderr, "maka:", ee.err)
		}
		return ee.code
	}
	// cobra usage errors (unknown flag, wrong arguments)
	fmt.Fprintln(stderr, "maka:", err)
	fmt.Fprintln(stderr, "Run 'maka --help' for usage.")
	return 2
}

func newRootCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "maka",
		Short: "Maka: a local runtime host for AI agent sessions",
		Long: `Maka runs one long-lived host per storage root that owns every agent
session in it and serves any number of clients over a local socket.`,
		Example: `  maka host serve                 # run the host in the foreground
  maka host status                # is a host running for the default root?
  maka host stop                  # ask it to drain and exit`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newHostCommand(), newVersionCommand())
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the maka version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), "maka", Version)
			return nil
		},
	}
}

// defaultRoot is ${MAKA_ROOT}, else ${XDG_CONFIG_HOME:-~/.config}/Maka/workspaces/default.
func defaultRoot() (string, error) {
	if r := os.Getenv("MAKA_ROOT"); r != "" {
		return r, nil
	}
	base := os.Getenv("XDG_CONFIG_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("cannot find the home directory (set MAKA_ROOT or --root): %w", err)
		}
		base = filepath.Join(home, ".config")
	}
	return filepath.Join(base, "Maka", "workspaces", "default"), nil
}

// rootFlag resolves --root, falling back to the default root.
func rootFlag(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	return defaultRoot()
}
