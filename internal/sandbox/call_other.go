//go:build !linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// HelperArg is argv[1] of the per-call helper, which only Linux has.
const HelperArg = "__maka-sandbox-call-7f3d9a"

// ErrUnavailable is returned by Start for a confined policy when the
// kernel cannot enforce it: the command is not run unconfined.
var ErrUnavailable = errors.New("sandbox unavailable")

// Availability is what the kernel offers the sandbox.
type Availability struct {
	Available bool
	ABI       int
	Reason    string
}

// Status reports that there is no sandbox: Landlock is Linux's.
func Status() Availability {
	return Availability{Reason: "Landlock needs Linux"}
}

// Spec is one command to run.
type Spec struct {
	Shell, Command, Dir string
	Env                 []string
	Policy              Policy
	Stdout, Stderr      *os.File
}

// Call is a running command. Without the Linux helper, containment is the
// shell's process group only.
type Call struct {
	cmd  *exec.Cmd
	pgid int
}

// Start starts spec in its own process group; a confined policy fails.
func Start(_ context.Context, spec Spec) (*Call, error) {
	if spec.Policy.Confined() {
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, Status().Reason)
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
	cmd := exec.Command(shell, "-c", spec.Command)
	cmd.Dir, cmd.Env = spec.Dir, spec.Env
	if spec.Stdout != nil {
		cmd.Stdout = spec.Stdout
	}
	if spec.Stderr != nil {
		cmd.Stderr = spec.Stderr
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &Call{cmd: cmd, pgid: cmd.Process.Pid}, nil
}

// Pid is the shell's pid.
func (c *Call) Pid() int { return c.pgid }

// Terminate sends SIGTERM to the shell's group.
func (c *Call) Terminate() { _ = syscall.Kill(-c.pgid, syscall.SIGTERM) }

// Kill sends SIGKILL to the shell's group.
func (c *Call) Kill() { _ = syscall.Kill(-c.pgid, syscall.SIGKILL) }

// Wait waits for the shell, then kills what is left of its group.
func (c *Call) Wait() (code int, signaled bool, err error) {
	werr := c.cmd.Wait()
	c.Kill()
	ps := c.cmd.ProcessState
	if ps == nil {
		return -1, false, werr
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), true, nil
	}
	return ps.ExitCode(), false, nil
}

// IsCallDescendant is false: there are no confined calls.
func IsCallDescendant(int) bool { return false }

// IsCallPeer is false: there are no confined calls.
func IsCallPeer(int, *os.File) bool { return false }
