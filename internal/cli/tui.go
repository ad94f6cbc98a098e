package cli

import (
	"context"
	"os"

	"github.com/spf13/cobra"

	"github.com/maka-agent/maka/internal/tui"
	"github.com/maka-agent/maka/protocol"
)

// tuiOptions are the flags of `maka` itself (the terminal UI).
type tuiOptions struct {
	host           hostFlags
	resume         string
	cwd            string
	permissionMode string
}

// attachTUI makes the root command open the terminal UI when it is run
// without a subcommand.
func attachTUI(root *cobra.Command) {
	var o tuiOptions
	o.host.register(root.Flags())
	root.Flags().StringVar(&o.resume, "resume", "", "open this session (its id) instead of starting a new one")
	root.Flags().StringVar(&o.cwd, "cwd", "", "workspace of new sessions (default: the current directory)")
	root.Flags().StringVar(&o.permissionMode, "permission-mode", "", "permission mode of new sessions: explore, ask, execute or bypass (default: the host's)")
	root.Args = cobra.NoArgs
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		switch protocol.PermissionMode(o.permissionMode) {
		case "", protocol.PermissionModeExplore, protocol.PermissionModeAsk, protocol.PermissionModeExecute, protocol.PermissionModeBypass:
		default:
			return exitf(2, "invalid --permission-mode %q (use explore, ask, execute or bypass)", o.permissionMode)
		}
		cwd := o.cwd
		if cwd == "" {
			var err error
			if cwd, err = os.Getwd(); err != nil {
				return exitf(1, "cannot read the current directory: %v", err)
			}
		}
		workspace, err := canonicalDir(cwd)
		if err != nil {
			return exitf(2, "invalid --cwd: %v", err)
		}
		if err := needTerminal(cmd); err != nil {
			return err
		}
		root, err := o.host.rootPath()
		if err != nil {
			return err
		}
		// Ctrl-C may end the connect (a host being started); inside the UI
		// it is a key.
		ctx, stop := interruptible(cmd.Context())
		conn, err := o.host.connect(ctx, protocol.SurfaceTUI)
		stop()
		if err != nil {
			return err
		}
		defer conn.Close()
		find, add := tuiLocalServers(o.host.rootHint())
		if err := tui.Run(cmd.Context(), tui.Options{
			Conn: conn, RootPath: root, Workspace: workspace, ResumeSessionID: o.resume,
			PermissionMode: o.permissionMode, In: cmd.InOrStdin(), Out: cmd.OutOrStdout(),
			LocalServers:   find,
			AddLocalServer: func(ctx context.Context, s tui.LocalServer, model string) error { return add(ctx, conn, s, model) },
		}); err != nil {
			return exitf(1, "%v", err)
		}
		return nil
	}
}

// needTerminal refuses to draw the terminal UI where there is no terminal
// to draw it on or read keys from.
func needTerminal(cmd *cobra.Command) error {
	for _, s := range []struct {
		name string
		f    any
	}{{"standard input", cmd.InOrStdin()}, {"standard output", cmd.OutOrStdout()}} {
		if f, ok := s.f.(*os.File); !ok || !isTerminal(f) {
			return exitf(2, "the terminal UI needs a terminal, and %s is not one; use 'maka run PROMPT' to run a prompt without it", s.name)
		}
	}
	return nil
}
