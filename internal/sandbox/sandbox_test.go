//go:build linux

package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/internal/proctest"
)

// testDeadline bounds every wait of these tests; it is never reached when
// the code works.
const testDeadline = 30 * time.Second

// running is a call started by a test: stdout is read line by line by
// the test, stderr is collected.
type running struct {
	t       *testing.T
	c       *Call
	outR    *os.File
	out     *bufio.Reader
	errR    *os.File
	stderr  bytes.Buffer
	errDone chan struct{}
}

func start(t *testing.T, spec Spec) *running {
	t.Helper()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	spec.Stdout, spec.Stderr = outW, errW
	if spec.Dir == "" {
		spec.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	c, err := Start(ctx, spec)
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		t.Fatalf("Start: %v", err)
	}
	r := &running{t: t, c: c, outR: outR, out: bufio.NewReader(outR), errR: errR, errDone: make(chan struct{})}
	go func() {
		defer close(r.errDone)
		_, _ = io.Copy(&r.stderr, errR)
	}()
	t.Cleanup(func() {
		c.Kill()
		c.Wait()
		r.stderrDone()
		outR.Close()
		errR.Close()
	})
	return r
}

// waitLine reads stdout until a line equal to want.
func (r *running) waitLine(want string) {
	r.t.Helper()
	_ = r.outR.SetReadDeadline(time.Now().Add(testDeadline))
	for {
		line, err := r.out.ReadString('\n')
		if err != nil {
			r.t.Fatalf("waiting for %q on stdout: %v", want, err)
		}
		if strings.TrimSuffix(line, "\n") == want {
			return
		}
	}
}

// stderrDone waits until stderr is read to its end (bounded: a process
// that outlived the call may hold it open).
func (r *running) stderrDone() {
	_ = r.errR.SetReadDeadline(time.Now().Add(testDeadline))
	<-r.errDone
}

// finish waits for the call and returns its status and the rest of its
// output.
func (r *running) finish() (code int, signaled bool, stdout, stderr string) {
	r.t.Helper()
	code, signaled, err := r.c.Wait()
	if err != nil {
		r.t.Fatalf("Wait: %v", err)
	}
	_ = r.outR.SetReadDeadline(time.Now().Add(testDeadline))
	rest, err := io.ReadAll(r.out)
	if err != nil {
		r.t.Fatalf("stdout: %v", err)
	}
	r.stderrDone()
	return code, signaled, string(rest), r.stderr.String()
}

func runCall(t *testing.T, spec Spec) (code int, stdout, stderr string) {
	t.Helper()
	code, _, stdout, stderr = start(t, spec).finish()
	return code, stdout, stderr
}

var markers atomic.Int64

// newMarker is a string no process but the ones of one test carries in
// its argv.
func newMarker() string {
	return fmt.Sprintf("maka-sandbox-test-%d-%d", os.Getpid(), markers.Add(1))
}

// escapes are commands that leave the shell's process group and session
// in the ways a daemon does. Each one, once its process runs, writes a
// line to the fifo "ready" (opened by the shell on fd 3), then becomes a
// sleep carrying marker as its argv[0].
var escapes = []struct{ name, command string }{
	{"setsid -f", `setsid -f bash -c 'echo up >ready; exec -a MARKER sleep 1000'`},
	{"setsid &", `setsid bash -c 'echo up >ready; exec -a MARKER sleep 1000' &`},
	{"(setsid &)", `(setsid bash -c 'echo up >ready; exec -a MARKER sleep 1000' &)`},
	{"fork setsid double fork", `(setsid bash -c '(echo up >ready; exec -a MARKER sleep 1000) & exit 0' &)`},
}

// escapeCommand runs every escape, waits until all of them run, prints
// "started", then runs then.
func escapeCommand(marker, then string) string {
	var b strings.Builder
	b.WriteString("mkfifo ready && exec 3<>ready || exit 99\n")
	for _, e := range escapes {
		b.WriteString(strings.ReplaceAll(e.command, "MARKER", marker) + "\n")
	}
	fmt.Fprintf(&b, "for i in %s; do read -r -u 3 _; done\n", strings.Repeat("x ", len(escapes)))
	b.WriteString("echo started\n" + then + "\n")
	return b.String()
}

// wantAlive checks that the escapes (and so the marker scan) are real: at
// least one process per escape carries the marker while the call runs.
func wantAlive(t *testing.T, marker string) []int {
	t.Helper()
	pids := proctest.Marked(t, marker)
	if len(pids) < len(escapes) {
		t.Fatalf("%d processes carry the marker while the call runs, want at least %d", len(pids), len(escapes))
	}
	return pids
}

func wantNone(t *testing.T, marker, after string) {
	t.Helper()
	if pids := proctest.Marked(t, marker); len(pids) > 0 {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		t.Fatalf("processes %v of the call survived %s", pids, after)
	}
}

func TestEscapesDieWhenTheShellExits(t *testing.T) {
	for _, e := range escapes {
		t.Run(e.name, func(t *testing.T) {
			marker := newMarker()
			cmd := "mkfifo ready && exec 3<>ready || exit 99\n" + strings.ReplaceAll(e.command, "MARKER", marker) +
				"\nread -r -u 3 _\necho started\nexit 7"
			r := start(t, Spec{Command: cmd})
			r.waitLine("started")
			code, signaled, _, stderr := r.finish()
			if code != 7 || signaled {
				t.Fatalf("code %d signaled %v, want 7 (stderr %q)", code, signaled, stderr)
			}
			wantNone(t, marker, "the shell's exit")
		})
	}
}

func TestKillEndsEveryProcess(t *testing.T) {
	marker := newMarker()
	r := start(t, Spec{Command: escapeCommand(marker, "sleep 1000")})
	r.waitLine("started")
	wantAlive(t, marker)
	r.c.Kill()
	code, signaled, _, _ := r.finish()
	if !signaled || code != 128+int(syscall.SIGKILL) {
		t.Errorf("code %d signaled %v, want SIGKILL", code, signaled)
	}
	wantNone(t, marker, "Kill")
}

func TestTerminateEndsEveryProcess(t *testing.T) {
	marker := newMarker()
	// The shell waits for its foreground sleep, which SIGTERM ends.
	r := start(t, Spec{Command: escapeCommand(marker, "sleep 1000")})
	r.waitLine("started")
	wantAlive(t, marker)
	r.c.Terminate()
	code, signaled, _, _ := r.finish()
	if code != 128+int(syscall.SIGTERM) {
		t.Errorf("code %d signaled %v, want SIGTERM", code, signaled)
	}
	wantNone(t, marker, "Terminate")
}

func TestTerminateReachesEveryDescendant(t *testing.T) {
	// A process that left the shell's group and session gets SIGTERM too:
	// it reports it through the fifo. (Its loop outlives the SIGTERM of its
	// sleep, which may come first.)
	r := start(t, Spec{Command: "mkfifo ready && exec 3<>ready || exit 99\n" +
		`setsid -f bash -c 'trap "echo term >ready; exit 0" TERM; echo up >ready; while :; do sleep 1000 & wait; done'` + "\n" +
		"read -r -u 3 _; trap '' TERM; echo started; read -r -u 3 got; echo $got"})
	r.waitLine("started")
	r.c.Terminate()
	r.waitLine("term")
	code, _, _, stderr := r.finish()
	if code != 0 {
		t.Errorf("code %d (stderr %q)", code, stderr)
	}
}

func TestExitStatus(t *testing.T) {
	tests := []struct {
		cmd      string
		code     int
		signaled bool
		stdout   string
	}{
		{"echo hi", 0, false, "hi\n"},
		{"exit 3", 3, false, ""},
		{"kill -TERM $$", 128 + int(syscall.SIGTERM), true, ""},
		{"cat; echo empty stdin", 0, false, "empty stdin\n"},
		{"pwd", 0, false, "DIR\n"},
	}
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		code, signaled, stdout, _ := start(t, Spec{Command: tt.cmd, Dir: dir}).finish()
		want := strings.ReplaceAll(tt.stdout, "DIR", dir)
		if code != tt.code || signaled != tt.signaled || stdout != want {
			t.Errorf("%q: code %d signaled %v stdout %q, want %d %v %q", tt.cmd, code, signaled, stdout, tt.code, tt.signaled, want)
		}
	}
}

func TestHostDeathEndsTheCall(t *testing.T) {
	marker := newMarker()
	dir := t.TempDir()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	host := exec.Command(os.Args[0], "-test.run=^$")
	host.Dir = dir
	host.Env = append(os.Environ(), fakeHostEnv+"=cd "+dir+"\n"+escapeCommand(marker, "sleep 1000"))
	host.Stdout = outW
	var hostErr bytes.Buffer
	host.Stderr = &hostErr
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	outW.Close()
	_ = outR.SetReadDeadline(time.Now().Add(testDeadline))
	lines := bufio.NewReader(outR)
	for {
		line, err := lines.ReadString('\n')
		if err != nil {
			_ = host.Process.Kill()
			_ = host.Wait()
			t.Fatalf("fake host: %v (stderr %q)", err, hostErr.String())
		}
		if line == "started\n" {
			break
		}
	}
	pids := wantAlive(t, marker)
	var fds []int
	for _, pid := range pids {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			fds = append(fds, fd)
			defer unix.Close(fd)
		}
	}
	if err := host.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = host.Wait()
	// A pidfd turns readable when its process exits.
	for i, fd := range fds {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(pfd, int(testDeadline/time.Millisecond))
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if n == 0 {
				t.Errorf("process %d of the call still runs after the host died", pids[i])
			}
			break
		}
	}
	wantNone(t, marker, "the host's death")
}

func TestIsCallDescendant(t *testing.T) {
	requireLandlock(t)
	ws := realTempDir(t)
	r := start(t, Spec{Command: "sleep 1000 & echo $!; wait", Dir: ws,
		Policy: Policy{Mode: ReadOnly, Workspace: ws}})
	line, err := r.out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	if !IsCallDescendant(pid) {
		t.Errorf("IsCallDescendant(%d) = false for a process of a confined call", pid)
	}
	if IsCallDescendant(os.Getpid()) {
		t.Error("IsCallDescendant(test process) = true")
	}
	r.c.Kill()
	r.finish()
	if IsCallDescendant(pid) {
		t.Errorf("IsCallDescendant(%d) = true after the call ended", pid)
	}
}

func TestIsCallDescendantOfAnUnconfinedCall(t *testing.T) {
	r := start(t, Spec{Command: "sleep 1000 & echo $!; wait"})
	line, err := r.out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	if pid <= 1 || IsCallDescendant(pid) {
		t.Errorf("IsCallDescendant(%d) = true for a process of an unconfined call", pid)
	}
}

func TestConfinedStartFailsClosedWithoutLandlock(t *testing.T) {
	saved := status
	status = func() Availability { return Availability{Reason: "kernel has no Landlock (ABI 0)"} }
	defer func() { status = saved }()
	ws := t.TempDir()
	marker := filepath.Join(ws, "ran")
	for _, mode := range []Mode{WorkspaceWrite, ReadOnly} {
		_, err := Start(context.Background(), Spec{Command: "touch " + marker, Dir: ws,
			Policy: Policy{Mode: mode, Workspace: ws}})
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "ABI 0") {
			t.Errorf("%s: Start error %v, want ErrUnavailable", mode, err)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran unconfined")
	}
}

func TestParseStatPPID(t *testing.T) {
	ppid, ok := parseStatPPID([]byte("42 (a) b) (c) S 17 42 42 0 -1"))
	if !ok || ppid != 17 {
		t.Errorf("ppid %d ok %v, want 17", ppid, ok)
	}
	if _, ok := parseStatPPID([]byte("42 (x")); ok {
		t.Error("parsed a truncated stat")
	}
}

func TestOnlyStdioReachesTheCommand(t *testing.T) {
	// A descriptor the host leaked (not close-on-exec) stays out of the
	// command, confined or not.
	leaked, err := syscall.Dup(int(os.Stdin.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(leaked)
	for _, p := range []Policy{{}, {Mode: ReadOnly}} {
		if p.Confined() {
			if !Status().Available {
				continue
			}
			p.Workspace = realTempDir(t)
		}
		code, stdout, stderr := runCall(t, Spec{Command: "ls /proc/$$/fd; true", Dir: p.Workspace, Policy: p})
		if code != 0 || strings.Fields(stdout) == nil || strings.Join(strings.Fields(stdout), " ") != "0 1 2" {
			t.Errorf("%s: the shell's descriptors are %q (exit %d, stderr %q), want 0 1 2", p.Mode, stdout, code, stderr)
		}
	}
}

func TestShellDiesWithTheHelper(t *testing.T) {
	// PR_SET_PDEATHSIG: a killed helper takes its shell along (processes
	// that left the shell are the documented limit).
	r := start(t, Spec{Command: "echo $$; exec sleep 1000"})
	line, err := r.out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	shell, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.PidfdOpen(shell, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := syscall.Kill(r.c.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.c.Wait(); err == nil {
		t.Error("Wait reported no error for a killed helper")
	}
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(pfd, int(testDeadline/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if n == 0 {
			_ = syscall.Kill(shell, syscall.SIGKILL)
			t.Error("the shell outlived its killed helper")
		}
		break
	}
}

// Pid is the helper's pid.
func (c *Call) Pid() int { return c.pid }
