package hostproc

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/maka-agent/maka/internal/storageroot"
)

// Main runs maka-host with args and returns the process exit code. Its one
// command is serve; `maka host serve ARGS` execs `maka-host serve ARGS`.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := &cobra.Command{
		Use:   "maka-host",
		Short: "The Maka runtime host",
		Long: `maka-host is the runtime host of a storage root: what 'maka host serve'
runs and what clients start on demand. Clients find it next to their own
executable, else on PATH.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE:          func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(newHostServeCommand())
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &flagError{command: c.CommandPath(), err: err}
	})
	root.SetArgs(args)
	return exitCode(root.Execute(), stderr)
}

// exitError carries a process exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitf returns an error that makes the host exit with code.
func exitf(code int, format string, args ...any) error {
	return &exitError{code: code, err: fmt.Errorf(format, args...)}
}

// flagError is a flag parsing error of a command.
type flagError struct {
	command string
	err     error
}

func (e *flagError) Error() string { return e.err.Error() }
func (e *flagError) Unwrap() error { return e.err }

// exitCode prints err to stderr and returns the exit code: the code of an
// exitError, else 2 (a usage error).
func exitCode(err error, stderr io.Writer) int {
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
	fmt.Fprintln(stderr, "maka:", err)
	helpFor := "maka host serve"
	var fe *flagError
	if errors.As(err, &fe) && fe.command != "maka-host serve" {
		helpFor = fe.command
	}
	fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", helpFor)
	return 2
}

// rootFlag resolves --root, falling back to the default root.
func rootFlag(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	return storageroot.DefaultPath()
}
