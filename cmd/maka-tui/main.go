// Command maka-tui is the Maka terminal UI, what `maka` without a
// subcommand opens. It is its own executable so that maka does not link the
// UI's renderer and terminal libraries; it starts the maka-host that maka
// names (--host-executable), else the one next to it, else on PATH.
package main

import (
	"context"
	"os"

	"github.com/maka-agent/maka/internal/cli"
	"github.com/maka-agent/maka/internal/tui"
)

func main() {
	os.Exit(cli.TUIMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, func(ctx context.Context, s cli.TUISession) error {
		opts := tui.Options{
			Conn: s.Conn, RootPath: s.RootPath, Workspace: s.Workspace, ResumeSessionID: s.ResumeSessionID,
			PermissionMode: s.PermissionMode, In: s.In, Out: s.Out,
		}
		if s.LocalServers != nil && s.AddLocalServer != nil {
			opts.LocalServers = func(ctx context.Context) []tui.LocalServer {
				found := s.LocalServers(ctx)
				out := make([]tui.LocalServer, len(found))
				for i, f := range found {
					out[i] = tui.LocalServer(f)
				}
				return out
			}
			opts.AddLocalServer = func(ctx context.Context, l tui.LocalServer, model string) error {
				return s.AddLocalServer(ctx, cli.LocalServer(l), model)
			}
		}
		return tui.Run(ctx, opts)
	}))
}
