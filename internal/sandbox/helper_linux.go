package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// HelperArg is argv[1] of the per-call helper: the host re-runs its own
// executable with it, and the package's init turns that process into the
// helper before any other init or main runs.
const HelperArg = "__maka-sandbox-call-7f3d9a"

// execArg is argv[1] of the helper's child that confines itself and then
// becomes the shell (confined policies only).
const execArg = "__maka-sandbox-exec-7f3d9a"

// The helper's file descriptors besides stdio.
const (
	// fdControl is the read end of the control pipe; only the host holds
	// the write end. A byte 't' terminates, 'k' kills, EOF kills and exits.
	fdControl = 3
	// fdStatus is where the helper reports: one line "ok" or "err <msg>"
	// once the shell runs (or could not start), then one line "exit <n>" or
	// "signal <n>" when the call is over.
	fdStatus = 4
	// fdExecReport is, in the confining child, the close-on-exec pipe on
	// which it reports why it could not become the shell.
	fdExecReport = 3
)

// Control bytes.
const (
	ctrlTerminate = 't'
	ctrlKill      = 'k'
)

// helperConfig is argv[2] of the helper and of the confining child; argv[3]
// is the command.
type helperConfig struct {
	Shell  string `json:"shell"`
	Dir    string `json:"dir"`
	Policy Policy `json:"policy"`
}

// init serves the helper and the confining child from any binary that
// imports the package. They exit through syscall.Exit: they buffer
// nothing, and os.Exit's exit hooks (a race-enabled build waits a second
// in them) are not theirs to run.
func init() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case HelperArg:
			syscall.Exit(helperMain())
		case execArg:
			syscall.Exit(execMain())
		}
	}
}

// helperArgs parses argv[2:] of the helper or the confining child.
func helperArgs() (helperConfig, string, error) {
	var cfg helperConfig
	if len(os.Args) != 4 {
		return cfg, "", fmt.Errorf("want 4 arguments, got %d", len(os.Args))
	}
	if err := json.Unmarshal([]byte(os.Args[2]), &cfg); err != nil {
		return cfg, "", err
	}
	return cfg, os.Args[3], nil
}

// helperMain is the per-call helper. It is a child subreaper, so every
// process the command starts stays its descendant whatever it does with
// sessions and groups; it reaps them all and returns only when none is
// left.
func helperMain() int {
	// Nothing but stdio reaches the command, whatever the host leaked.
	unix.CloseOnExec(fdControl)
	unix.CloseOnExec(fdStatus)
	_ = unix.CloseRange(fdStatus+1, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	status := os.NewFile(fdStatus, "status")
	ctrl := os.NewFile(fdControl, "control")
	fail := func(err error) int {
		fmt.Fprintf(status, "err %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	// Signals meant for the host's group do not reach the helper (it has
	// its own group); one sent to the helper itself ends the call.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)

	cfg, command, err := helperArgs()
	if err != nil {
		return fail(fmt.Errorf("sandbox helper: %w", err))
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("sandbox helper: PR_SET_CHILD_SUBREAPER: %w", err))
	}
	shell, err := startShell(cfg, command)
	if err != nil {
		reapAll()
		return fail(err)
	}
	fmt.Fprintf(status, "ok\n")

	// The reaper is the only waiter: it reports the shell's status and
	// every reap, and closes noChildren once wait4 has nothing left.
	shellDone := make(chan syscall.WaitStatus, 1)
	reaped := make(chan struct{}, 1)
	noChildren := make(chan struct{})
	go func() {
		defer close(noChildren)
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, 0, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil {
				return
			}
			if pid == shell {
				shellDone <- ws
			}
			select {
			case reaped <- struct{}{}:
			default:
			}
		}
	}()
	// The control reader ends with the pipe: the host closed it or died.
	ctrlC := make(chan byte)
	ctrlEOF := make(chan struct{})
	go func() {
		defer close(ctrlEOF)
		b := make([]byte, 1)
		for {
			if _, err := ctrl.Read(b); err != nil {
				return
			}
			ctrlC <- b[0]
		}
	}()

	var ws syscall.WaitStatus
	hostGone := false
loop:
	for {
		select {
		case ws = <-shellDone:
			break loop
		case c := <-ctrlC:
			switch c {
			case ctrlTerminate:
				signalDescendants(syscall.SIGTERM)
			case ctrlKill:
				signalDescendants(syscall.SIGKILL)
			}
		case <-ctrlEOF:
			hostGone = true
			break loop
		case <-sigs:
			hostGone = true
			break loop
		}
	}
	// Nothing of the call outlives it: kill what is left, and again after
	// every reap (an orphan of a killed process is reparented here), until
	// no child remains.
	for {
		signalDescendants(syscall.SIGKILL)
		select {
		case <-reaped:
			continue
		case <-noChildren:
		}
		break
	}
	if hostGone {
		return 1
	}
	if ws.Signaled() {
		fmt.Fprintf(status, "signal %d\n", int(ws.Signal()))
		return 128 + int(ws.Signal())
	}
	fmt.Fprintf(status, "exit %d\n", ws.ExitStatus())
	return ws.ExitStatus()
}

// reapAll reaps children until none is left (after a failed start).
func reapAll() {
	for {
		signalDescendants(syscall.SIGKILL)
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(-1, &ws, 0, nil); err != nil && !errors.Is(err, syscall.EINTR) {
			return
		}
	}
}

// startShell starts the shell of the call in a session of its own and
// returns its pid. The session has no controlling terminal: the host's,
// if it runs in one, is not the command's (/dev/tty fails with ENXIO), so
// the command cannot push input into it (TIOCSTI). Containment does not rest on the session: the helper
// signals its descendants one by one. PR_SET_PDEATHSIG makes the shell
// die with the helper if the helper is killed. A confined call starts the confining child
// instead, which becomes the shell once the Landlock domain is in force;
// startShell returns only after that exec succeeded.
func startShell(cfg helperConfig, command string) (int, error) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer devnull.Close()
	attr := &syscall.ProcAttr{
		Dir:   cfg.Dir,
		Env:   os.Environ(),
		Files: []uintptr{devnull.Fd(), 1, 2},
		Sys:   &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL},
	}
	if !cfg.Policy.Confined() {
		pid, err := syscall.ForkExec(cfg.Shell, []string{cfg.Shell, "-c", command}, attr)
		if err != nil {
			return 0, fmt.Errorf("start %s: %w", cfg.Shell, err)
		}
		return pid, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer r.Close()
	attr.Files = append(attr.Files, w.Fd())
	pid, err := syscall.ForkExec("/proc/self/exe", []string{"maka-sandbox", execArg, os.Args[2], command}, attr)
	w.Close()
	if err != nil {
		return 0, fmt.Errorf("start the confined shell: %w", err)
	}
	// The pipe closes on the child's successful exec of the shell; any
	// bytes are the reason it failed.
	msg, _ := io.ReadAll(r)
	if len(msg) > 0 {
		return 0, errors.New(strings.TrimSpace(string(msg)))
	}
	return pid, nil
}

// execMain is the confining child: it drops every capability of its own
// thread, restricts the thread to the policy and execs the shell from it,
// so the shell and everything it starts run without capabilities and in
// the Landlock domain while the helper stays outside it (signal scoping
// then keeps the command from signalling the helper).
func execMain() int {
	unix.CloseOnExec(fdExecReport)
	_ = unix.CloseRange(fdExecReport+1, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	report := os.NewFile(fdExecReport, "report")
	cfg, command, err := helperArgs()
	if err == nil {
		runtime.LockOSThread() // never unlocked: the thread execs or exits
		if err = dropCapabilities(); err == nil {
			err = confineThread(cfg.Policy)
		}
	}
	if err == nil {
		err = syscall.Exec(cfg.Shell, []string{cfg.Shell, "-c", command}, os.Environ())
		err = fmt.Errorf("exec %s: %w", cfg.Shell, err)
	}
	fmt.Fprintf(report, "%v\n", err)
	return 127
}
