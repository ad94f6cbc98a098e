package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/internal/storageroot"
	"github.com/maka-agent/maka/protocol"
)

// Failed is the ConnectOrSpawn outcome when no host could be reached
// before the election deadline; see SpawnResult.Failure.
const Failed ResultKind = "failed"

// FailureReason says why ConnectOrSpawn failed.
type FailureReason string

// Reasons of a Failed result.
const (
	// StartupTimeout: no host became reachable before the deadline.
	StartupTimeout FailureReason = "startup_timeout"
	// HostUnresponsive: a host accepted the socket connection but did not
	// complete the handshake.
	HostUnresponsive FailureReason = "host_unresponsive"
)

// Election bounds.
const (
	DefaultElectionDeadline = 45 * time.Second
	MaxElectionDeadline     = 120 * time.Second
	// LaunchInterval is the minimum time between two candidate launches
	// of one ConnectOrSpawn call.
	LaunchInterval = 250 * time.Millisecond
	backoffMin     = 20 * time.Millisecond
	backoffMax     = 250 * time.Millisecond
)

// HostLogFile is the name of the log file spawned hosts write to, in the
// root's control directory.
const HostLogFile = "host.log"

// hostLogMaxBytes is the size past which the host log is rotated to
// HostLogFile+".1" before a launch.
const hostLogMaxBytes = 8 << 20

// SpawnOptions configure how ConnectOrSpawn starts a host when none
// answers.
type SpawnOptions struct {
	// Executable is the runtime host's executable (maka-host), run with
	// Args. Default: os.Executable(), which is right only inside maka-host
	// itself; every other program names the maka-host to start.
	Executable string
	// Args builds the candidate's arguments (after the executable) for the
	// resolved root; nil means HostServeArgs followed by --idle-grace (when
	// IdleGrace is set) and ExtraArgs.
	Args func(rootPath, rootID string) []string
	// IdleGrace, when positive, is passed as --idle-grace to the default
	// arguments: how long the spawned host stays up without clients.
	IdleGrace time.Duration
	// ExtraArgs are appended to the default arguments verbatim (for example
	// "--model-script", "/abs/script.json"). The candidate runs in "/", so
	// paths must be absolute.
	ExtraArgs []string
	// Env is the candidate's environment; nil means the current one.
	Env []string
	// LogFile receives the candidate's stdout and stderr (appended);
	// default: HostLogFile in the root's control directory.
	LogFile string
	// Deadline bounds the election (root preparation excluded); default
	// DefaultElectionDeadline, at most MaxElectionDeadline.
	Deadline time.Duration
	// Launch replaces the detached process launch; it returns once the
	// candidate has started (or failed to). Used by tests.
	Launch func(ctx context.Context, c Candidate) error
}

// Candidate is one host process to launch.
type Candidate struct {
	Executable string
	Args       []string
	Env        []string
	// Dir is the working directory of the process.
	Dir     string
	LogFile string
	// RootPath and RootID name the root the candidate is for.
	RootPath string
	RootID   string
}

// SpawnResult is the outcome of ConnectOrSpawn.
type SpawnResult struct {
	// Kind is Connected, Incompatible (a host that cannot be replaced while
	// it has resident work) or Failed.
	Kind         ResultKind
	Conn         *Conn                  // Connected
	Registration *Registration          // Connected and Incompatible
	Handshake    *protocol.Incompatible // Incompatible
	Failure      FailureReason          // Failed
	// Last is the last discovery attempt, for diagnostics.
	Last Result
	// Launched counts the candidates this call started.
	Launched int
	// LaunchErr is the last launch failure, if any.
	LaunchErr error
	// RootPath is the canonical root path, RootID its id and LogFile the
	// log of spawned hosts.
	RootPath string
	RootID   string
	LogFile  string
}

// SpawnedIdleGrace is how long a host a client spawned stays up with no
// client, operation or running work (a host started by hand in the
// foreground runs until it is stopped).
const SpawnedIdleGrace = 30 * time.Second

// HostServeArgs returns the arguments that run a host for one root as a
// candidate: it refuses to start unless the root still has rootID, exits
// with code 2 when another host already owns the root, and exits after
// SpawnedIdleGrace idle unless the caller appends another --idle-grace.
// They are the arguments of the host's executable, maka-host ("serve ...").
func HostServeArgs(rootPath, rootID string) []string {
	return []string{"serve", "--root", rootPath, "--expected-root-id", rootID, "--idle-grace", SpawnedIdleGrace.String()}
}

func (s *SpawnOptions) normalize() error {
	if s.Deadline < 0 || s.Deadline > MaxElectionDeadline {
		return fmt.Errorf("client: election deadline %v outside (0, %v]", s.Deadline, MaxElectionDeadline)
	}
	if s.Deadline == 0 {
		s.Deadline = DefaultElectionDeadline
	}
	if s.IdleGrace < 0 {
		return fmt.Errorf("client: negative idle grace %v", s.IdleGrace)
	}
	if s.Executable == "" && s.Launch == nil {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("client: cannot find the host executable: %w", err)
		}
		s.Executable = exe
	}
	return nil
}

func (s *SpawnOptions) candidate(rootPath, rootID, controlDir string) Candidate {
	var args []string
	if s.Args != nil {
		args = s.Args(rootPath, rootID)
	} else {
		args = HostServeArgs(rootPath, rootID)
		if s.IdleGrace > 0 {
			args = append(args, "--idle-grace", s.IdleGrace.String())
		}
		args = append(args, s.ExtraArgs...)
	}
	logFile := s.LogFile
	if logFile == "" {
		logFile = filepath.Join(controlDir, HostLogFile)
	}
	return Candidate{
		Executable: s.Executable, Args: args, Env: s.Env, Dir: "/", LogFile: logFile,
		RootPath: rootPath, RootID: rootID,
	}
}

// ConnectOrSpawn connects to the host of opts.RootPath, starting one when
// none answers. It creates the root if missing, then runs a bounded
// election until spawn.Deadline: discover and connect; when no host is
// registered, reachable or accepting, launch a detached candidate (at most
// one per LaunchInterval) and retry with a growing, jittered backoff. The
// root's owner lock makes every candidate but one exit, so any number of
// concurrent callers start exactly one host. An error means the options
// or the root are unusable, or ctx ended; every other outcome is a
// SpawnResult.
func ConnectOrSpawn(ctx context.Context, opts Options, spawn SpawnOptions) (SpawnResult, error) {
	if err := opts.normalize(); err != nil {
		return SpawnResult{}, err
	}
	if err := spawn.normalize(); err != nil {
		return SpawnResult{}, err
	}
	capability, err := storageroot.Resolve(opts.RootPath, storageroot.KindInteractive)
	if err != nil {
		return SpawnResult{}, err
	}
	controlDir, err := storageroot.PrepareControlDirectory(capability)
	if err != nil {
		return SpawnResult{}, err
	}
	cand := spawn.candidate(capability.Path(), capability.RootID(), controlDir)
	launch := spawn.Launch
	if launch == nil {
		launch = func(_ context.Context, c Candidate) error {
			_, _, err := LaunchDetached(c)
			return err
		}
	}
	e := election{
		opts: opts, rootID: capability.RootID(), controlDir: controlDir, cand: cand, launch: launch,
		deadline: time.Now().Add(spawn.Deadline),
		watch:    watchRegistrations(controlDir),
	}
	defer e.watch.close()
	out, err := e.run(ctx)
	out.RootPath, out.RootID, out.LogFile = capability.Path(), capability.RootID(), cand.LogFile
	return out, err
}

type election struct {
	opts       Options
	rootID     string
	controlDir string
	cand       Candidate
	launch     func(context.Context, Candidate) error
	deadline   time.Time
	// watch ends a backoff early when a registration is published; nil
	// when the control directory cannot be watched.
	watch *dirWatch
}

func (e *election) run(ctx context.Context) (SpawnResult, error) {
	var out SpawnResult
	nextLaunch := time.Now()
	backoff := backoffMin
	sawUnresponsive := false
	for time.Now().Before(e.deadline) {
		res := attempt(ctx, e.opts, e.rootID, e.controlDir, e.deadline)
		out.Last = res
		if res.Kind == Connected {
			out.Kind, out.Conn, out.Registration = Connected, res.Conn, res.Registration
			return out, nil
		}
		if err := ctx.Err(); err != nil {
			return out, err
		}
		if res.Kind == Unavailable && res.Reason == HandshakeFailed {
			sawUnresponsive = true
		}
		if !time.Now().Before(e.deadline) {
			break
		}
		mayLaunch := res.Kind == Unavailable || res.Kind == Draining
		if res.Kind == Incompatible {
			if res.Handshake.Replacement == protocol.ReplacementBlockedByResidency {
				out.Kind, out.Registration, out.Handshake = Incompatible, res.Registration, res.Handshake
				return out, nil
			}
			// wait_for_idle_exit: the old host leaves once idle; poll
			// without launching a competitor.
		}
		if now := time.Now(); mayLaunch && !now.Before(nextLaunch) {
			if err := e.launchOne(ctx); err != nil {
				out.LaunchErr = err
			} else {
				out.Launched++
			}
			nextLaunch = now.Add(LaunchInterval)
		}
		remaining := time.Until(e.deadline)
		if remaining <= 0 {
			break
		}
		if err := e.watch.sleep(ctx, min(remaining, jittered(backoff))); err != nil {
			return out, err
		}
		backoff = min(backoffMax, backoff*2)
	}
	out.Kind, out.Failure = Failed, StartupTimeout
	if sawUnresponsive {
		out.Failure = HostUnresponsive
	}
	return out, nil
}

// launchOne starts one candidate, bounded by the election deadline.
func (e *election) launchOne(ctx context.Context) error {
	lctx, cancel := context.WithDeadline(ctx, e.deadline)
	defer cancel()
	return e.launch(lctx, e.cand)
}

// jittered scales d by a random factor in [0.75, 1.25), at least 1 ms.
func jittered(d time.Duration) time.Duration {
	j := time.Duration(float64(d) * (0.75 + rand.Float64()*0.5))
	return max(j, time.Millisecond)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// dirWatch reports registrations published in a control directory (they
// are renamed into place).
type dirWatch struct {
	f   *os.File
	buf []byte
}

func watchRegistrations(dir string) *dirWatch {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_MOVED_TO); err != nil {
		_ = unix.Close(fd)
		return nil
	}
	// A non-blocking descriptor makes a pollable file with read deadlines.
	return &dirWatch{f: os.NewFile(uintptr(fd), "inotify"), buf: make([]byte, 4096)}
}

// sleep waits for d, for less when something is renamed into the
// directory, or until ctx ends.
func (w *dirWatch) sleep(ctx context.Context, d time.Duration) error {
	if w == nil || w.f == nil {
		return sleepCtx(ctx, d)
	}
	if err := w.f.SetReadDeadline(time.Now().Add(d)); err != nil {
		return sleepCtx(ctx, d)
	}
	stop := context.AfterFunc(ctx, func() { _ = w.f.SetReadDeadline(time.Now()) })
	defer stop()
	if _, err := w.f.Read(w.buf); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		// The watch is unusable: sleep plainly from now on.
		_ = w.f.Close()
		w.f = nil
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		return nil
	}
	return ctx.Err()
}

func (w *dirWatch) close() {
	if w != nil && w.f != nil {
		_ = w.f.Close()
	}
}

// LaunchDetached starts c as a detached process: a session of its own
// (it survives the caller and its terminal), stdin from /dev/null, stdout
// and stderr appended to c.LogFile. It does not wait for the process: a
// goroutine reaps it and closes exited when it ends (that goroutine ends
// with the process).
func LaunchDetached(c Candidate) (pid int, exited <-chan struct{}, err error) {
	if c.Executable == "" {
		return 0, nil, errors.New("client: no executable to launch")
	}
	log, err := openHostLog(c.LogFile)
	if err != nil {
		return 0, nil, err
	}
	defer log.Close()
	cmd := exec.Command(c.Executable, c.Args...)
	cmd.Env = c.Env
	cmd.Dir = c.Dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, nil, fmt.Errorf("client: launch runtime host: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	return cmd.Process.Pid, done, nil
}

// openHostLog opens the log for appending (0600), rotating it first when
// it has grown past hostLogMaxBytes.
func openHostLog(path string) (*os.File, error) {
	if path == "" {
		return os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	}
	if st, err := os.Stat(path); err == nil && st.Size() > hostLogMaxBytes {
		_ = os.Rename(path, path+".1")
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("client: open host log: %w", err)
	}
	return f, nil
}

// String describes a failed result and what to look at next.
func (r SpawnResult) String() string {
	switch r.Kind {
	case Connected:
		return "connected to the runtime host (pid " + strconv.FormatInt(r.Registration.PID, 10) + ")"
	case Incompatible:
		return "the running runtime host speaks an incompatible protocol and has work in progress"
	case Failed:
		if r.Failure == HostUnresponsive {
			return "the runtime host of " + r.RootPath + " accepts connections but does not answer"
		}
		msg := "no runtime host came up for " + r.RootPath
		if r.LaunchErr != nil {
			msg += ": " + r.LaunchErr.Error()
		}
		return msg
	}
	return string(r.Kind)
}
