package hostproc

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/maka-agent/maka/internal/exitcode"
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
		command := c.CommandPath()
		if command == "maka-host serve" {
			command = "maka host serve" // how users start it
		}
		return &exitcode.FlagError{Command: command, Err: err}
	})
	root.SetArgs(args)
	return exitcode.Code(root.Execute(), stderr, "maka host serve")
}

// exitf returns an error that makes the host exit with code.
func exitf(code int, format string, args ...any) error {
	return exitcode.Errorf(code, format, args...)
}

// rootFlag resolves --root, falling back to the default root.
func rootFlag(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	return storageroot.DefaultPath()
}
