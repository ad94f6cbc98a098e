package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/exitcode"
	"github.com/maka-agent/maka/protocol"
)

// The terminal UI is its own executable, maka-tui, so that maka does not
// link (nor initialise, in every command and every Bash call) the UI's
// markdown renderer, syntax highlighter and terminal libraries. `maka` with
// no subcommand replaces itself with maka-tui, same arguments and
// environment. The runtime host is a third executable, maka-host, which
// both start (and 'maka host serve' execs) from next to themselves, else
// from PATH.
const (
	hostExecutableName = "maka-host"
	tuiExecutable      = "maka-tui"
)

// tuiOptions are the flags of `maka` itself (the terminal UI).
type tuiOptions struct {
	host           hostFlags
	resume         string
	cwd            string
	permissionMode string
}

func (o *tuiOptions) register(cmd *cobra.Command) {
	o.host.register(cmd.Flags())
	cmd.Flags().StringVar(&o.resume, "resume", "", "open this session (its id) instead of starting a new one")
	cmd.Flags().StringVar(&o.cwd, "cwd", "", "workspace of new sessions (default: the current directory)")
	cmd.Flags().StringVar(&o.permissionMode, "permission-mode", "", "permission mode of new sessions: explore, ask, execute or bypass (default: the host's)")
	cmd.Args = cobra.NoArgs
}

// check validates the flags and the terminal, and returns the workspace.
func (o *tuiOptions) check(cmd *cobra.Command) (workspace string, err error) {
	if workspace, err = o.checkFlags(); err != nil {
		return "", err
	}
	if err := needTerminal(cmd); err != nil {
		return "", err
	}
	return workspace, nil
}

// checkFlags validates the flags and returns the workspace.
func (o *tuiOptions) checkFlags() (workspace string, err error) {
	switch protocol.PermissionMode(o.permissionMode) {
	case "", protocol.PermissionModeExplore, protocol.PermissionModeAsk, protocol.PermissionModeExecute, protocol.PermissionModeBypass:
	default:
		return "", exitf(2, "invalid --permission-mode %q (use explore, ask, execute or bypass)", o.permissionMode)
	}
	cwd := o.cwd
	if cwd == "" {
		if cwd, err = os.Getwd(); err != nil {
			return "", exitf(1, "cannot read the current directory: %v", err)
		}
	}
	if workspace, err = canonicalDir(cwd); err != nil {
		return "", exitf(2, "invalid --cwd: %v", err)
	}
	return workspace, nil
}

// attachTUI makes the root command open the terminal UI when it is run
// without a subcommand: it checks the flags, then execs maka-tui with the
// arguments of this process.
func attachTUI(root *cobra.Command, args []string) {
	var o tuiOptions
	o.register(root)
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		if _, err := o.checkFlags(); err != nil {
			return err
		}
		exe, err := siblingExecutable(tuiExecutable)
		if err != nil {
			return exitf(1, "the terminal UI is a separate executable: %v; build both with 'go build -o DIR ./cmd/...' in a maka checkout (DIR: the directory of maka), or use 'maka run PROMPT' without the terminal UI", err)
		}
		if err := needTerminal(cmd); err != nil {
			return err
		}
		// maka-tui starts the host this maka would start, not one it
		// finds on its own (which may be another install's).
		argv := []string{os.Args[0]}
		if host, err := hostExecutable(); err == nil {
			argv = append(argv, "--"+hostExecutableFlag+"="+host)
		}
		argv = append(argv, args...)
		err = unix.Exec(exe, argv, os.Environ())
		return exitf(1, "cannot start the terminal UI %s: %v", exe, err)
	}
}

// hostExecutableFlag is maka-tui's hidden flag by which maka names the
// maka-host it would start itself.
const hostExecutableFlag = "host-executable"

// siblingExecutable finds the executable name next to this one, else on
// PATH; either must be one the user can trust (trustedExecutable).
func siblingExecutable(name string) (string, error) {
	self, selfErr := os.Executable()
	if selfErr == nil {
		p := filepath.Join(filepath.Dir(self), name)
		if _, err := os.Stat(p); err == nil {
			if err := trustedExecutable(p); err != nil {
				return "", err
			}
			return p, nil
		}
	}
	// The first on PATH, as a shell would run it, skipping relative
	// entries (".", "bin"): a file in the current directory (a workspace
	// an agent writes to) is never run, nor does it hide one further on.
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
			continue
		}
		if err := trustedExecutable(p); err != nil {
			return "", err
		}
		return p, nil
	}
	dir := "?"
	if selfErr == nil {
		dir = filepath.Dir(self)
	}
	return "", fmt.Errorf("the executable %s is neither in %s nor on PATH", name, dir)
}

// trustedExecutable refuses an executable that someone other than this
// user (or root) could have put there: one that is not a regular
// executable file, is owned by another user, is writable by group or
// others, or lies in a directory others may write to without the sticky
// bit. maka runs it as the user (a sibling maka-host or maka-tui planted in
// a shared directory next to maka must not be).
func trustedExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	uid := uint32(os.Geteuid())
	if sys.Uid != uid && sys.Uid != 0 {
		return fmt.Errorf("%s belongs to another user (uid %d); not running it", p, sys.Uid)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s is writable by other users; not running it", p)
	}
	dir, err := os.Stat(filepath.Dir(p))
	if err != nil {
		return err
	}
	if dir.Mode().Perm()&0o002 != 0 && dir.Mode()&os.ModeSticky == 0 {
		return fmt.Errorf("%s is in a directory every user may write to; not running it", p)
	}
	return nil
}

// hostExecutable is the executable that runs the runtime host: the
// maka-host next to this one, else on PATH. A test of the build check
// replaces it.
var hostExecutable = func() (string, error) {
	exe, err := siblingExecutable(hostExecutableName)
	if err != nil {
		return "", fmt.Errorf("the runtime host is a separate executable: %v; build all three with 'go build -o DIR ./cmd/...' in a maka checkout (DIR: the directory of maka)", err)
	}
	return exe, nil
}

// TUISession is what the terminal UI is started with.
type TUISession struct {
	// Conn is an accepted, ready connection; TUIMain closes it after run.
	Conn            *client.Conn
	RootPath        string
	Workspace       string
	ResumeSessionID string
	PermissionMode  string
	In              io.Reader
	Out             io.Writer
	// LocalServers probes loopback for local model servers when the root
	// has no connection; AddLocalServer adds the one the user chose with
	// the chosen model, as 'maka connection add' would.
	LocalServers   func(context.Context) []LocalServer
	AddLocalServer func(ctx context.Context, s LocalServer, model string) error
}

// LocalServer is a local model server found on loopback, as the terminal
// UI offers it (the same fields as tui.LocalServer, so that maka-tui
// converts one into the other).
type LocalServer struct {
	// Name says what it is ("Ollama"); Slug is the connection it would
	// become; Provider its provider type.
	Name, Slug, Provider, BaseURL string
	// Models are the ids it lists, at least one.
	Models []string
	// AddCommand is the 'maka connection add' line that adds it.
	AddCommand string
}

// TUIMain is the command line of maka-tui: the flags of `maka` without a
// subcommand. It connects to (or starts) the host with the maka-host
// executable next to it and hands the connection to run. It returns the exit code.
func TUIMain(args []string, stdin io.Reader, stdout, stderr io.Writer, run func(context.Context, TUISession) error) int {
	root := &cobra.Command{
		Use:   "maka",
		Short: "The Maka terminal UI",
		Long: `The Maka terminal UI (maka-tui): what 'maka' without a subcommand opens.
It uses the runtime host of the storage root, starting it with the
maka-host executable next to this one (else the one on PATH).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	var o tuiOptions
	o.register(root)
	var hostExe string
	root.Flags().StringVar(&hostExe, hostExecutableFlag, "", "the maka-host to start (set by maka)")
	_ = root.Flags().MarkHidden(hostExecutableFlag)
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		if hostExe != "" {
			if !filepath.IsAbs(hostExe) {
				return exitf(2, "--%s must be an absolute path", hostExecutableFlag)
			}
			if err := trustedExecutable(hostExe); err != nil {
				return exitf(1, "%v", err)
			}
			hostExecutable = func() (string, error) { return hostExe, nil }
		}
		workspace, err := o.check(cmd)
		if err != nil {
			return err
		}
		rootPath, err := o.host.rootPath()
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
		if err := run(cmd.Context(), TUISession{
			Conn: conn, RootPath: rootPath, Workspace: workspace, ResumeSessionID: o.resume,
			PermissionMode: o.permissionMode, In: cmd.InOrStdin(), Out: cmd.OutOrStdout(),
			LocalServers:   find,
			AddLocalServer: func(ctx context.Context, s LocalServer, model string) error { return add(ctx, conn, s, model) },
		}); err != nil {
			return exitf(1, "%v", err)
		}
		return nil
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitcode.FlagError{Command: c.CommandPath(), Err: err}
	})
	root.SetArgs(args)
	return exitCode(root.Execute(), stderr)
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
