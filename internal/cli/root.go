// Package cli implements the maka command line.
package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/maka-agent/maka/internal/exitcode"
	"github.com/maka-agent/maka/internal/storageroot"
)

// Version is the maka version, set at build time with
// -ldflags "-X github.com/maka-agent/maka/internal/cli.Version=...".
var Version = "0.1.0-dev"

// exitf returns an error that makes maka exit with code.
func exitf(code int, format string, args ...any) error {
	return exitcode.Errorf(code, format, args...)
}

// Main runs maka with args and returns the process exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCommand(args, stdin, stdout, stderr)
	root.SetArgs(args)
	return exitCode(root.Execute(), stderr)
}

// exitCode prints err of a command to stderr and returns the exit code.
func exitCode(err error, stderr io.Writer) int { return exitcode.Code(err, stderr, "maka") }

func newRootCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "maka",
		Short: "Maka: a local runtime host for AI agent sessions",
		Long: `Maka runs AI agent sessions on your machine. One long-lived runtime host per
storage root owns every session in it and serves any number of clients over a
local socket; commands that need it start it on demand, and it exits on its
own after a while without clients.

Get started:
  1. Add a model connection (the API key is read from stdin or --key-env):
       maka connection add --provider openai --model MODEL_ID --key-env OPENAI_API_KEY
  2. Run a prompt in the current directory:
       maka run "explain this repository"
  3. Continue, list or follow sessions:
       maka run --continue "now write the tests"
       maka sessions
       maka attach SESSION

The storage root is --root, else $MAKA_ROOT, else
${XDG_CONFIG_HOME:-~/.config}/Maka/workspaces/default.`,
		Example: `  maka                                         # the terminal UI: new session in this directory
  maka --resume SESSION                        # the terminal UI on an existing session
  maka run "summarise the open TODOs"          # one turn, streamed to stdout
  git diff | maka run - --json                 # prompt from stdin, JSON lines out
  maka sessions show SESSION                   # a session and its transcript
  maka connection list                         # model connections and keys
  maka host status                             # is a host running for the default root?
  maka completion bash > ~/.local/share/bash-completion/completions/maka`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddGroup(&cobra.Group{ID: groupAgent, Title: "Agent sessions:"}, &cobra.Group{ID: groupSetup, Title: "Setup and the runtime host:"})
	for _, c := range []*cobra.Command{newRunCommand(), newSessionsCommand(), newAttachCommand(), newCompactCommand()} {
		c.GroupID = groupAgent
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{newConnectionCommand(), newMCPCommand(), newHostCommand(), newVersionCommand()} {
		c.GroupID = groupSetup
		root.AddCommand(c)
	}
	attachTUI(root, args)
	root.SetHelpCommandGroupID(groupSetup)
	root.SetCompletionCommandGroupID(groupSetup)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitcode.FlagError{Command: c.CommandPath(), Err: err}
	})
	return root
}

// Command groups of the top-level help.
const (
	groupAgent = "agent"
	groupSetup = "setup"
)

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the maka version",
		Example: "  maka version",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), "maka", Version)
			return nil
		},
	}
}

// defaultRoot is ${MAKA_ROOT}, else ${XDG_CONFIG_HOME:-~/.config}/Maka/workspaces/default.
func defaultRoot() (string, error) { return storageroot.DefaultPath() }

// rootFlag resolves --root, falling back to the default root.
func rootFlag(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	return defaultRoot()
}
