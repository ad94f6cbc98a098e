// Command maka-tui is the Maka terminal UI, what `maka` without a
// subcommand opens. It is its own executable so that maka does not link the
// UI's renderer and terminal libraries; it runs the host with the maka
// executable next to it.
package main

import (
	"context"
	"os"

	"github.com/maka-agent/maka/internal/cli"
	"github.com/maka-agent/maka/internal/tui"
)

func main() {
	os.Exit(cli.TUIMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, func(ctx context.Context, s cli.TUISession) error {
		return tui.Run(ctx, tui.Options{
			Conn: s.Conn, RootPath: s.RootPath, Workspace: s.Workspace, ResumeSessionID: s.ResumeSessionID,
			PermissionMode: s.PermissionMode, In: s.In, Out: s.Out,
		})
	}))
}
