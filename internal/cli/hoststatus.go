package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/exitcode"
	"github.com/maka-agent/maka/internal/landlockprobe"
	"github.com/maka-agent/maka/internal/storageroot"
	"github.com/maka-agent/maka/protocol"
)

func newHostCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "host",
		Short: "Run, inspect or stop the runtime host of a storage root",
		Long: `The runtime host owns every session of one storage root. Clients start
it on demand; these commands run it in the foreground, show its state, or
stop it.

The storage root is --root, else $MAKA_ROOT, else
${XDG_CONFIG_HOME:-~/.config}/Maka/workspaces/default.`,
		// Without Args and RunE cobra would print help and succeed for an
		// unknown subcommand such as "maka host bogus".
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newHostServeCommand(), newHostStatusCommand(), newHostStopCommand())
	return cmd
}

// newHostServeCommand is 'maka host serve': the host is its own executable,
// maka-host, which this command execs with its arguments (same process, so
// the pid a caller started is the host's), after finding it next to maka,
// else on PATH. maka-host parses and checks the flags.
func newHostServeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "serve [flags]",
		Short: "Run the runtime host in the foreground",
		Long: `Run the runtime host of a storage root in the foreground (the maka-host
executable next to maka, else on PATH). 'maka host serve --help' lists its
flags.`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			exe, err := hostExecutable()
			if err != nil {
				return exitf(1, "%v", err)
			}
			argv := append([]string{exe, "serve"}, args...)
			err = unix.Exec(exe, argv, os.Environ())
			return exitf(1, "cannot start the runtime host %s: %v", exe, err)
		},
	}
}

// hostView is what status prints.
type hostView struct {
	Root         string               `json:"root"`
	Running      bool                 `json:"running"`
	Reason       string               `json:"reason,omitempty"`
	Registration *client.Registration `json:"registration,omitempty"`
	Status       *protocol.HostStatus `json:"status,omitempty"`
	// Build is "same" when the host runs the build of maka-host this
	// command starts, "other" when it runs another one, and absent when
	// that is unknown.
	Build string `json:"build,omitempty"`
	// Sandbox is what the kernel offers the Bash sandbox: "landlock ABI
	// <n>" or "unavailable: <reason>". It is probed by this command: the
	// host runs on the same kernel.
	Sandbox string `json:"sandbox"`
}

// sandboxSummary is the sandbox line of host status.
func sandboxSummary() string { return landlockprobe.Summary() }

func newHostStatusCommand() *cobra.Command {
	var rootPath string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show whether a runtime host runs for a storage root",
		Long:  "Show the runtime host of a storage root: its state, pid, socket and counters.\nExit status 0 when a host answered, 1 otherwise.",
		Example: `  maka host status
  maka host status --root ~/work/agents --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			root, err := rootFlag(rootPath)
			if err != nil {
				return exitf(2, "%v", err)
			}
			view, conn := probe(cmd.Context(), root)
			if conn != nil {
				defer conn.Close()
			}
			view.Sandbox = sandboxSummary()
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				_ = enc.Encode(view)
			} else {
				printView(out, view)
			}
			if !view.Running {
				return &exitcode.Error{Code: 1, Err: errors.New("")}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&rootPath, "root", "", "storage root directory")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// probe connects to the host of root without creating anything.
func probe(ctx context.Context, root string) (hostView, *client.Conn) {
	view := hostView{Root: root}
	res, err := client.ConnectExisting(ctx, client.Options{RootPath: root, Surface: protocol.SurfaceInspect})
	if err != nil {
		switch storageroot.CodeOf(err) {
		case storageroot.CodeRootNotFound, storageroot.CodeRootUnmarked:
			view.Reason = "not a storage root yet (a client creates it on first use)"
		default:
			view.Reason = err.Error()
		}
		return view, nil
	}
	view.Registration = res.Registration
	switch res.Kind {
	case client.Connected:
		st, err := res.Conn.Status(ctx)
		if err != nil {
			view.Reason = "host did not answer host.status: " + err.Error()
			return view, res.Conn
		}
		view.Running, view.Status = true, &st
		if pid, err := res.Conn.PeerPID(); err == nil {
			if same, known := sameBuild(pid); known && same {
				view.Build = "same"
			} else if known {
				view.Build = "other"
			}
		}
		return view, res.Conn
	case client.Draining:
		view.Reason = "host is draining"
	case client.Incompatible:
		view.Reason = "host speaks an incompatible protocol"
	default:
		switch res.Reason {
		case client.NotRegistered:
			view.Reason = "no runtime host is running"
		case client.ConnectFailed:
			view.Reason = "no runtime host is running (stale registration)"
		default:
			view.Reason = string(res.Reason)
		}
	}
	return view, nil
}

func printView(out interface{ Write([]byte) (int, error) }, v hostView) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	defer w.Flush()
	fmt.Fprintf(w, "root\t%s\n", v.Root)
	if v.Sandbox != "" {
		// The last line (deferred after the flush, so it runs first).
		defer fmt.Fprintf(w, "sandbox\t%s\n", v.Sandbox)
	}
	if !v.Running {
		fmt.Fprintf(w, "host\tnot running: %s\n", v.Reason)
		return
	}
	fmt.Fprintf(w, "host\trunning (%s)\n", v.Status.State)
	fmt.Fprintf(w, "pid\t%d\n", v.Registration.PID)
	fmt.Fprintf(w, "epoch\t%s\n", v.Status.HostEpoch)
	fmt.Fprintf(w, "socket\t%s\n", v.Registration.Endpoint)
	fmt.Fprintf(w, "started\t%s\n", v.Registration.CreatedAt)
	fmt.Fprintf(w, "clients\t%d\n", v.Status.Connections)
	fmt.Fprintf(w, "operations\t%d\n", v.Status.ActiveOperations)
	fmt.Fprintf(w, "residencies\t%d\n", v.Status.ActiveResidencies)
	switch v.Build {
	case "same":
		fmt.Fprintf(w, "build\tthe same as the maka-host this maka starts\n")
	case "other":
		fmt.Fprintf(w, "build\tanother build than the maka-host this maka starts (stop the host to run that one)\n")
	}
}

func newHostStopCommand() *cobra.Command {
	var rootPath string
	var wait time.Duration
	var cancelTurns bool
	cmd := &cobra.Command{
		Use:   "stop",
		Short: "Ask the runtime host of a storage root to drain and exit",
		Long: `Stop the host of a storage root. Turns that are running are listed first,
and stop waits up to --wait for them to finish before it stops the host;
with --cancel-turns they are stopped now and end cancelled. A host whose
turns are still running when the wait ends keeps running (exit 1).

Stop sends SIGTERM to the registered host after checking, through the
socket's peer credentials, that the registered pid is the process serving
it. The host finishes running commands and exits; stop waits for that.`,
		Example: `  maka host stop
  maka host stop --wait 5m           # give running turns five minutes
  maka host stop --cancel-turns      # stop running turns now`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			root, err := rootFlag(rootPath)
			if err != nil {
				return exitf(2, "%v", err)
			}
			view, conn := probe(cmd.Context(), root)
			if conn == nil || !view.Running {
				return exitf(1, "nothing to stop for %s: %s", root, view.Reason)
			}
			defer conn.Close()
			pid, err := conn.PeerPID()
			if err != nil {
				return exitf(1, "cannot verify the host process: %v", err)
			}
			if pid != int(view.Registration.PID) {
				return exitf(1, "registered pid %d is not the process serving the socket (pid %d); not signalling", view.Registration.PID, pid)
			}
			if err := awaitRunningTurns(cmd, conn, wait, cancelTurns); err != nil {
				return err
			}
			conn.Close()
			if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
				return exitf(1, "cannot signal pid %d: %v", pid, err)
			}
			deadline := time.Now().Add(hostExitWait)
			for time.Now().Before(deadline) {
				if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
					fmt.Fprintf(cmd.OutOrStdout(), "stopped runtime host (pid %d)\n", pid)
					return nil
				}
				if isZombieOrGone(pid) {
					fmt.Fprintf(cmd.OutOrStdout(), "stopped runtime host (pid %d)\n", pid)
					return nil
				}
				time.Sleep(20 * time.Millisecond)
			}
			return exitf(1, "runtime host (pid %d) is still running %v after it was asked to stop", pid, hostExitWait)
		},
	}
	cmd.Flags().StringVar(&rootPath, "root", "", "storage root directory")
	cmd.Flags().DurationVar(&wait, "wait", 15*time.Second, "how long running turns may take to finish before stop gives up")
	cmd.Flags().BoolVar(&cancelTurns, "cancel-turns", false, "stop running turns now (they end cancelled) instead of waiting for them")
	return cmd
}

// hostExitWait bounds the wait for a signalled host to exit: its own
// shutdown is bounded by host.ShutdownGrace.
const hostExitWait = 15 * time.Second

// turnPoll is how often stop looks again at the turns it waits for.
const turnPoll = 200 * time.Millisecond

// awaitRunningTurns lists the sessions whose turn runs (or waits for the
// user), then waits up to wait for none to be left, unless cancel: the
// host's shutdown then stops them. Turns still running when the wait ends
// fail the stop (exit 1) and leave the host running.
func awaitRunningTurns(cmd *cobra.Command, conn *client.Conn, wait time.Duration, cancel bool) error {
	ctx := cmd.Context()
	busy := func(s protocol.SessionSummary) bool {
		return s.Status == protocol.SessionRunning || s.Status == protocol.SessionWaitingForUser
	}
	running, err := listSessions(ctx, conn, false, 0, busy)
	if err != nil {
		return exitf(1, "cannot list running turns: %v", err)
	}
	if len(running) == 0 {
		return nil
	}
	out := cmd.ErrOrStderr()
	fmt.Fprintf(out, "%d running %s:\n", len(running), plural(len(running), "turn", "turns"))
	for _, s := range running {
		fmt.Fprintf(out, "  session %s  %s  %s\n", s.SessionID, s.Status, sessionLabel(s))
	}
	if cancel {
		fmt.Fprintf(out, "stopping them: they end cancelled\n")
		return nil
	}
	fmt.Fprintf(out, "waiting up to %v for them to finish (--cancel-turns stops them now)\n", wait)
	deadline := time.Now().Add(wait)
	for {
		running, err = listSessions(ctx, conn, false, 0, busy)
		switch {
		case err != nil:
			return exitf(1, "cannot list running turns: %v", err)
		case len(running) == 0:
			return nil
		case !time.Now().Before(deadline):
			return exitf(1, "%d %s still running after %v; the host keeps running (use --cancel-turns to stop them)",
				len(running), plural(len(running), "turn is", "turns are"), wait)
		}
		select {
		case <-ctx.Done():
			return exitf(1, "stop interrupted; the host keeps running")
		case <-time.After(min(turnPoll, time.Until(deadline))):
		}
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// sessionLabel is a session's name, or its workspace when it has none.
func sessionLabel(s protocol.SessionSummary) string {
	if s.Name != "" {
		return s.Name
	}
	return s.Workspace.Path
}

// isZombieOrGone reports whether pid has exited (a zombie waiting for its
// parent counts as exited).
func isZombieOrGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z'
	}
	return false
}
