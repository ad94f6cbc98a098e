package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Helper timing.
const (
	// startTimeout bounds the helper's start: building the ruleset and
	// starting the shell.
	startTimeout = time.Minute
	// statusTimeout bounds reading the helper's last status line once it
	// has exited (the pipe is then closed; this only guards against a
	// writer that should not exist).
	statusTimeout = 5 * time.Second
)

// ErrUnavailable is returned by Start for a confined policy when the
// kernel cannot enforce it: the command is not run unconfined.
var ErrUnavailable = errors.New("sandbox unavailable")

// Spec is one command to run.
type Spec struct {
	// Shell runs Command as "Shell -c Command"; empty means bash if it
	// is on PATH, else sh.
	Shell   string
	Command string
	// Dir is the working directory (the workspace).
	Dir string
	// Env is the command's environment; nil means the host's.
	Env    []string
	Policy Policy
	// Stdout and Stderr receive the command's output; nil means
	// /dev/null. stdin is always /dev/null.
	Stdout, Stderr *os.File
}

// Call is a running command under its helper.
type Call struct {
	cmd    *exec.Cmd
	pid    int
	ctrl   *os.File
	status *os.File
	lines  *bufio.Reader

	waitOnce sync.Once
	code     int
	signaled bool
	err      error
}

// live are the pids of the running helpers, true for a confined one.
var live = struct {
	sync.Mutex
	m map[int]bool
}{m: map[int]bool{}}

// Start starts spec under a new helper and returns once the shell runs.
// ctx bounds the start only; the call runs until it ends or is killed.
// A confined policy on a kernel without Landlock fails with
// ErrUnavailable.
func Start(ctx context.Context, spec Spec) (*Call, error) {
	p := spec.Policy
	if p.Confined() {
		if st := Status(); !st.Available {
			return nil, fmt.Errorf("%w: %s", ErrUnavailable, st.Reason)
		}
		if !filepath.IsAbs(p.Workspace) {
			return nil, fmt.Errorf("sandbox: workspace %q is not absolute", p.Workspace)
		}
		if p.TempDir == "" {
			p.TempDir = os.TempDir()
		}
	}
	shell := spec.Shell
	if shell == "" {
		var err error
		if shell, err = exec.LookPath("bash"); err != nil {
			if shell, err = exec.LookPath("sh"); err != nil {
				return nil, err
			}
		}
	}
	cfg, err := json.Marshal(helperConfig{Shell: shell, Dir: spec.Dir, Policy: p})
	if err != nil {
		return nil, err
	}
	ctrlR, ctrlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	statR, statW, err := os.Pipe()
	if err != nil {
		ctrlR.Close()
		ctrlW.Close()
		return nil, err
	}
	// /proc/self/exe is this very executable even if its file was
	// replaced since the host started.
	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{"maka-sandbox", HelperArg, string(cfg), spec.Command},
		Dir:        spec.Dir,
		Env:        spec.Env,
		ExtraFiles: []*os.File{ctrlR, statW},
		// Its own group: signals for the host's group do not reach it.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if spec.Stdout != nil {
		cmd.Stdout = spec.Stdout
	}
	if spec.Stderr != nil {
		cmd.Stderr = spec.Stderr
	}
	// The helper is registered before a peer check can see its shell: a
	// check waits for the lock until the helper's pid is in live.
	live.Lock()
	err = cmd.Start()
	if err == nil {
		live.m[cmd.Process.Pid] = p.Confined()
	}
	live.Unlock()
	ctrlR.Close()
	statW.Close()
	if err != nil {
		ctrlW.Close()
		statR.Close()
		return nil, err
	}
	c := &Call{cmd: cmd, pid: cmd.Process.Pid, ctrl: ctrlW, status: statR, lines: bufio.NewReader(statR)}

	_ = statR.SetReadDeadline(time.Now().Add(startTimeout))
	stop := context.AfterFunc(ctx, func() { _ = statR.SetReadDeadline(time.Unix(1, 0)) })
	line, err := c.lines.ReadString('\n')
	stop()
	_ = statR.SetReadDeadline(time.Time{})
	line = strings.TrimSuffix(line, "\n")
	if err == nil && line == "ok" {
		return c, nil
	}
	// The helper failed (and exits) or is stuck: end it.
	if err != nil {
		_ = cmd.Process.Kill()
	}
	c.Wait()
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case strings.HasPrefix(line, "err "):
		return nil, errors.New(strings.TrimPrefix(line, "err "))
	case err != nil:
		return nil, fmt.Errorf("sandbox helper did not start: %w", err)
	}
	return nil, fmt.Errorf("sandbox helper: unexpected status %q", line)
}

// Terminate sends SIGTERM to every process of the call.
func (c *Call) Terminate() { c.send(ctrlTerminate) }

// Kill sends SIGKILL to every process of the call; the helper then
// exits, and Wait returns, once none is left.
func (c *Call) Kill() { c.send(ctrlKill) }

// send writes a control byte; after the helper exited it is a no-op.
func (c *Call) send(b byte) { _, _ = c.ctrl.Write([]byte{b}) }

// Wait waits for the call to end and returns the shell's exit code
// (128+n, with signaled, when signal n killed it). When Wait returns, no
// process of the call remains: the helper exits only after it reaped the
// last one. err is set when the helper itself failed or was killed.
// Wait may be called more than once.
func (c *Call) Wait() (code int, signaled bool, err error) {
	c.waitOnce.Do(func() {
		werr := c.cmd.Wait()
		live.Lock()
		delete(live.m, c.pid)
		live.Unlock()
		c.ctrl.Close()
		_ = c.status.SetReadDeadline(time.Now().Add(statusTimeout))
		line, _ := c.lines.ReadString('\n')
		c.status.Close()
		kind, num, _ := strings.Cut(strings.TrimSpace(line), " ")
		n, nerr := strconv.Atoi(num)
		switch {
		case nerr == nil && kind == "exit":
			c.code = n
		case nerr == nil && kind == "signal":
			c.code, c.signaled = 128+n, true
		default:
			c.code = -1
			if werr == nil {
				werr = errors.New("no exit status")
			}
			c.err = fmt.Errorf("sandbox helper: %w", werr)
		}
	})
	return c.code, c.signaled, c.err
}
