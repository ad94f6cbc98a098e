package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/cli"
	"github.com/maka-agent/maka/internal/control"
	"github.com/maka-agent/maka/internal/storageroot"
	"github.com/maka-agent/maka/protocol"
)

// makaBin is the maka binary built once for the whole package; maka-tui
// is built next to it.
var makaBin string

// Bounds of the waits in this file. They only cap waits for events; no test
// relies on them elapsing except the explicit "does not exit" check.
const (
	readyTimeout   = 10 * time.Second
	exitTimeout    = 10 * time.Second
	commandTimeout = 20 * time.Second
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "maka-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	makaBin = filepath.Join(dir, "maka")
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	// maka and, next to it, the runtime host and the terminal UI it execs.
	build := exec.Command(gobin, "build", "-o", dir, "github.com/maka-agent/maka/cmd/maka", "github.com/maka-agent/maka/cmd/maka-host", "github.com/maka-agent/maka/cmd/maka-tui")
	build.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// sandbox runs maka processes with an environment that never points at the
// real default root: MAKA_ROOT is unset and XDG_CONFIG_HOME is a temporary
// directory.
type sandbox struct {
	t   *testing.T
	xdg string
	env []string
}

func newSandbox(t *testing.T, extraEnv ...string) *sandbox {
	t.Helper()
	xdg := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "MAKA_ROOT=") || strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "XDG_CONFIG_HOME="+xdg)
	env = append(env, extraEnv...)
	return &sandbox{t: t, xdg: xdg, env: env}
}

// result is a finished maka command.
type result struct {
	code           int
	stdout, stderr string
}

// run runs maka to completion.
func (s *sandbox) run(args ...string) result {
	s.t.Helper()
	return s.runBin(makaBin, args...)
}

// runBin runs the maka binary bin to completion.
func (s *sandbox) runBin(bin string, args ...string) result {
	s.t.Helper()
	r, err := s.execMaka(bin, nil, args)
	if err != nil {
		s.t.Fatalf("maka %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// execMaka runs bin with args (and stdin, when not nil) to completion
// within commandTimeout. err reports that it could not be run or did not
// finish in time; an exit status is the result's code.
func (s *sandbox) execMaka(bin string, stdin io.Reader, args []string) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = s.env
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	var ee *exec.ExitError
	if err := cmd.Run(); err != nil && !errors.As(err, &ee) {
		return result{code: -1, stderr: err.Error()}, err
	}
	r := result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
	if ctx.Err() != nil {
		return r, fmt.Errorf("did not finish within %v; stderr:\n%s", commandTimeout, r.stderr)
	}
	return r, nil
}

// hostProc is a maka process started in the background (usually
// `maka host serve`).
type hostProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	ready  chan struct{} // closed when the host logs that it is ready
	exited chan struct{} // closed once the process has been reaped

	mu     sync.Mutex
	stderr strings.Builder
}

// start starts maka in the background; t.Cleanup stops it (SIGTERM, then
// SIGKILL) if it is still running.
func (s *sandbox) start(args ...string) *hostProc {
	s.t.Helper()
	cmd := exec.Command(makaBin, args...)
	cmd.Env = s.env
	pipe, err := cmd.StderrPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	p := &hostProc{t: s.t, cmd: cmd, ready: make(chan struct{}), exited: make(chan struct{})}
	go p.watch(pipe)
	s.t.Cleanup(p.kill)
	return p
}

func (p *hostProc) watch(pipe io.Reader) {
	sc := bufio.NewScanner(pipe)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	sawReady := false
	for sc.Scan() {
		line := sc.Text()
		p.mu.Lock()
		p.stderr.WriteString(line)
		p.stderr.WriteByte('\n')
		p.mu.Unlock()
		if !sawReady && strings.Contains(line, `msg="runtime host ready"`) {
			sawReady = true
			close(p.ready)
		}
	}
	_, _ = io.Copy(io.Discard, pipe)
	_ = p.cmd.Wait()
	close(p.exited)
}

func (p *hostProc) pid() int { return p.cmd.Process.Pid }

func (p *hostProc) stderrText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

func (p *hostProc) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// kill stops the process if it still runs: SIGTERM first so that it cleans
// up after itself, SIGKILL if it does not exit in time.
func (p *hostProc) kill() {
	if p.hasExited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	select {
	case <-p.exited:
		return
	case <-timer.C:
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// waitReady waits until the host logged that it is ready.
func (p *hostProc) waitReady() {
	p.t.Helper()
	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	select {
	case <-p.ready:
	case <-p.exited:
		p.t.Fatalf("host exited with code %d before becoming ready; stderr:\n%s", p.cmd.ProcessState.ExitCode(), p.stderrText())
	case <-timer.C:
		p.t.Fatalf("host did not become ready within %v; stderr:\n%s", readyTimeout, p.stderrText())
	}
}

// waitExit waits for the process to exit and returns its exit code.
func (p *hostProc) waitExit() int {
	p.t.Helper()
	timer := time.NewTimer(exitTimeout)
	defer timer.Stop()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-timer.C:
		p.t.Fatalf("process %d did not exit within %v; stderr:\n%s", p.pid(), exitTimeout, p.stderrText())
		return -1
	}
}

// serve starts `maka host serve --root root` with extra flags and waits
// until it is ready.
func (s *sandbox) serve(root string, flags ...string) *hostProc {
	s.t.Helper()
	p := s.start(append([]string{"host", "serve", "--root", root}, flags...)...)
	p.waitReady()
	return p
}

// newRoot returns a fresh storage root path and its capability; the root's
// control directory and endpoint directories are removed at cleanup.
func newRoot(t *testing.T) (string, *storageroot.Capability) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	c, err := storageroot.Resolve(root, storageroot.KindInteractive)
	if err != nil {
		t.Fatal(err)
	}
	cleanupRootID(t, c.RootID())
	return root, c
}

// cleanupRootID removes, at cleanup, the control directory of rootID under
// the real home and any endpoint directory of it left in /tmp.
func cleanupRootID(t *testing.T, rootID string) {
	t.Helper()
	t.Cleanup(func() { removeRootArtifacts(t, rootID) })
}

func removeRootArtifacts(t *testing.T, rootID string) {
	ns, err := storageroot.ControlNamespace()
	if err != nil {
		t.Errorf("control namespace: %v", err)
		return
	}
	if err := os.RemoveAll(filepath.Join(ns, rootID)); err != nil {
		t.Errorf("remove control directory: %v", err)
	}
	for _, dir := range endpointDirs(t, rootID) {
		_ = os.RemoveAll(dir)
	}
}

// endpointDirs lists the endpoint directories of rootID in /tmp.
func endpointDirs(t *testing.T, rootID string) []string {
	t.Helper()
	prefix, err := control.EndpointPrefix(rootID, os.Getuid())
	if err != nil {
		t.Fatal(err)
	}
	matches, err := filepath.Glob(filepath.Join(control.EndpointRoot, prefix+"??????"))
	if err != nil {
		t.Fatal(err)
	}
	return matches
}

func controlDir(t *testing.T, rootID string) string {
	t.Helper()
	ns, err := storageroot.ControlNamespace()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(ns, rootID)
}

func readRegistration(t *testing.T, rootID string) (control.Registration, bool) {
	t.Helper()
	reg, found, err := control.ReadRegistration(controlDir(t, rootID))
	if err != nil {
		t.Fatalf("read registration: %v", err)
	}
	return reg, found
}

// connect connects to the host of root; it must answer and be ready.
func connect(t *testing.T, root string) (*client.Conn, protocol.HostStatus, *client.Registration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := client.Connect(ctx, client.Options{RootPath: root, Surface: protocol.SurfaceInspect})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	if res.Kind != client.Connected {
		t.Fatalf("connect: %s (%s): %v", res.Kind, res.Reason, res.Err)
	}
	t.Cleanup(func() { res.Conn.Close() })
	st, err := res.Conn.Status(ctx)
	if err != nil {
		t.Fatalf("host.status: %v", err)
	}
	if st.State != protocol.StateReady {
		t.Fatalf("host state = %q, want ready", st.State)
	}
	return res.Conn, st, res.Registration
}

// statusView mirrors the JSON that `maka host status --json` prints.
type statusView struct {
	Root         string                `json:"root"`
	Running      bool                  `json:"running"`
	Reason       string                `json:"reason"`
	Registration *control.Registration `json:"registration"`
	Status       *protocol.HostStatus  `json:"status"`
	Build        string                `json:"build"`
}

func (s *sandbox) statusJSON(args ...string) (statusView, int) {
	s.t.Helper()
	r := s.run(append([]string{"host", "status", "--json"}, args...)...)
	var v statusView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		s.t.Fatalf("status --json output %q: %v (stderr %q)", r.stdout, err, r.stderr)
	}
	return v, r.code
}

func assertNotExist(t *testing.T, path, what string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s %s still exists (lstat: %v)", what, path, err)
	}
}

func assertExists(t *testing.T, path, what string) {
	t.Helper()
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("%s %s: %v", what, path, err)
	}
}

// assertLockFree checks that the owner lock of c can be taken, then releases
// it.
func assertLockFree(t *testing.T, c *storageroot.Capability) {
	t.Helper()
	owner, err := storageroot.TryAcquireOwner(c)
	if err != nil {
		t.Fatalf("acquire owner: %v", err)
	}
	if owner == nil {
		t.Fatal("owner lock is still held")
	}
	if err := owner.Close(); err != nil {
		t.Errorf("release owner: %v", err)
	}
}

func TestServeStatusAndSignalShutdown(t *testing.T) {
	s := newSandbox(t)
	root, capability := newRoot(t)
	host := s.serve(root, "--idle-grace", "0")

	conn, st, reg := connect(t, root)
	if reg.PID != int64(host.pid()) {
		t.Errorf("registration pid = %d, want %d", reg.PID, host.pid())
	}
	if reg.RootID != capability.RootID() {
		t.Errorf("registration rootId = %s, want %s", reg.RootID, capability.RootID())
	}
	endpointDir := filepath.Dir(reg.Endpoint)
	wantPrefix, _ := control.EndpointPrefix(capability.RootID(), os.Getuid())
	if filepath.Dir(endpointDir) != control.EndpointRoot || !strings.HasPrefix(filepath.Base(endpointDir), wantPrefix) {
		t.Errorf("endpoint %s is not under %s/%s*", reg.Endpoint, control.EndpointRoot, wantPrefix)
	}
	conn.Close()

	v, code := s.statusJSON("--root", root)
	if code != 0 {
		t.Fatalf("status exit code = %d, want 0", code)
	}
	if !v.Running || v.Registration == nil || v.Status == nil {
		t.Fatalf("status = %+v, want running with registration and status", v)
	}
	if v.Root != root {
		t.Errorf("status root = %q, want %q", v.Root, root)
	}
	if v.Registration.PID != int64(host.pid()) {
		t.Errorf("status pid = %d, want %d", v.Registration.PID, host.pid())
	}
	if v.Status.State != protocol.StateReady || v.Registration.State != protocol.StateReady {
		t.Errorf("status state = %q, registration state = %q, want ready", v.Status.State, v.Registration.State)
	}
	if v.Status.HostEpoch != st.HostEpoch || v.Registration.HostEpoch != st.HostEpoch {
		t.Errorf("status epoch = %q / %q, want %q", v.Status.HostEpoch, v.Registration.HostEpoch, st.HostEpoch)
	}

	text := s.run("host", "status", "--root", root)
	if text.code != 0 || !strings.Contains(text.stdout, "running (ready)") || !strings.Contains(text.stdout, strconv.Itoa(host.pid())) {
		t.Errorf("status (text) = %d %q, want exit 0 naming the state and pid", text.code, text.stdout)
	}

	if err := host.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := host.waitExit(); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0; stderr:\n%s", code, host.stderrText())
	}
	assertNotExist(t, filepath.Join(controlDir(t, capability.RootID()), control.RegistrationFile), "registration")
	assertNotExist(t, endpointDir, "endpoint directory")
	assertLockFree(t, capability)
}

func TestSecondServeRefused(t *testing.T) {
	s := newSandbox(t)
	root, capability := newRoot(t)
	host := s.serve(root, "--idle-grace", "0")
	regPath := filepath.Join(controlDir(t, capability.RootID()), control.RegistrationFile)
	before, err := os.ReadFile(regPath)
	if err != nil {
		t.Fatal(err)
	}
	reg, _ := readRegistration(t, capability.RootID())

	r := s.run("host", "serve", "--root", root, "--idle-grace", "0")
	if r.code != 2 {
		t.Fatalf("second serve exit code = %d, want 2; stderr:\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, capability.Path()) || !strings.Contains(r.stderr, "pid "+strconv.Itoa(host.pid())) {
		t.Errorf("second serve message %q does not name root %s and pid %d", r.stderr, capability.Path(), host.pid())
	}
	if strings.Contains(r.stderr, "runtime host listening") {
		t.Errorf("second serve started listening: %s", r.stderr)
	}

	after, err := os.ReadFile(regPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Errorf("registration changed:\nbefore %s\nafter  %s", before, after)
	}
	if got := endpointDirs(t, capability.RootID()); len(got) != 1 || got[0] != filepath.Dir(reg.Endpoint) {
		t.Errorf("endpoint directories = %v, want only %s", got, filepath.Dir(reg.Endpoint))
	}
	if host.hasExited() {
		t.Fatal("first host exited")
	}
	_, st, _ := connect(t, root)
	if st.HostEpoch != reg.HostEpoch {
		t.Errorf("host epoch = %s, want %s", st.HostEpoch, reg.HostEpoch)
	}
}

func TestConcurrentServeOneWinner(t *testing.T) {
	s := newSandbox(t)
	root := filepath.Join(t.TempDir(), "root")
	// The root is created by the hosts themselves; its id is known only
	// afterwards.
	t.Cleanup(func() {
		if c, err := storageroot.Discover(root); err == nil {
			removeRootArtifacts(t, c.RootID())
		}
	})

	const n = 5
	procs := make([]*hostProc, n)
	for i := range procs {
		procs[i] = s.start("host", "serve", "--root", root, "--idle-grace", "0")
	}
	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	var winners []*hostProc
	losers := 0
	for _, p := range procs {
		select {
		case <-p.ready:
			winners = append(winners, p)
		case <-p.exited:
			if code := p.cmd.ProcessState.ExitCode(); code != 2 {
				t.Errorf("pid %d exit code = %d, want 2; stderr:\n%s", p.pid(), code, p.stderrText())
				continue
			}
			if !strings.Contains(p.stderrText(), "already owns") {
				t.Errorf("loser message %q does not say the root is owned", p.stderrText())
			}
			losers++
		case <-timer.C:
			t.Fatalf("pid %d neither became ready nor exited; stderr:\n%s", p.pid(), p.stderrText())
		}
	}
	if len(winners) != 1 || losers != n-1 {
		t.Fatalf("%d hosts serving and %d refused, want 1 and %d", len(winners), losers, n-1)
	}
	_, _, reg := connect(t, root)
	if reg.PID != int64(winners[0].pid()) {
		t.Errorf("registered pid = %d, want the winner %d", reg.PID, winners[0].pid())
	}
	capability, err := storageroot.Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	if dirs := endpointDirs(t, capability.RootID()); len(dirs) != 1 {
		t.Errorf("endpoint directories = %v, want exactly one", dirs)
	}
}

func TestRestartAfterKill(t *testing.T) {
	s := newSandbox(t)
	root, capability := newRoot(t)
	first := s.serve(root, "--idle-grace", "0")
	old, found := readRegistration(t, capability.RootID())
	if !found {
		t.Fatal("no registration")
	}
	oldDir := filepath.Dir(old.Endpoint)

	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if code := first.waitExit(); code != -1 {
		t.Fatalf("exit code after SIGKILL = %d, want -1 (killed)", code)
	}
	stale, found := readRegistration(t, capability.RootID())
	if !found || stale.HostEpoch != old.HostEpoch {
		t.Fatalf("stale registration = %+v (found %v), want epoch %s", stale, found, old.HostEpoch)
	}
	assertExists(t, oldDir, "stale endpoint directory")

	v, code := s.statusJSON("--root", root)
	if code != 1 || v.Running {
		t.Errorf("status after SIGKILL: exit %d running %v, want exit 1 and not running", code, v.Running)
	}
	if r := s.run("host", "status", "--root", root); r.code != 1 || !strings.Contains(r.stdout, "not running") {
		t.Errorf("status (text) after SIGKILL = %d %q, want exit 1 and 'not running'", r.code, r.stdout)
	}

	second := s.serve(root, "--idle-grace", "0")
	assertNotExist(t, oldDir, "stale endpoint directory")
	_, st, reg := connect(t, root)
	if reg.HostEpoch == old.HostEpoch || st.HostEpoch != reg.HostEpoch {
		t.Errorf("new host epoch %s (status %s), want a fresh one (old %s)", reg.HostEpoch, st.HostEpoch, old.HostEpoch)
	}
	if reg.PID != int64(second.pid()) {
		t.Errorf("registered pid = %d, want %d", reg.PID, second.pid())
	}
	if dirs := endpointDirs(t, capability.RootID()); len(dirs) != 1 || dirs[0] != filepath.Dir(reg.Endpoint) {
		t.Errorf("endpoint directories = %v, want only %s", dirs, filepath.Dir(reg.Endpoint))
	}
	if _, code := s.statusJSON("--root", root); code != 0 {
		t.Errorf("status exit code = %d, want 0", code)
	}
}

func TestStop(t *testing.T) {
	s := newSandbox(t)
	root, capability := newRoot(t)
	host := s.serve(root, "--idle-grace", "0")

	r := s.run("host", "stop", "--root", root, "--wait", "10s")
	if r.code != 0 {
		t.Fatalf("stop exit code = %d, want 0; stderr:\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "pid "+strconv.Itoa(host.pid())) {
		t.Errorf("stop output %q does not name pid %d", r.stdout, host.pid())
	}
	// stop returns once the host process has exited (a zombie awaiting
	// its parent counts), so the exit status is already there to collect.
	if code := host.waitExit(); code != 0 {
		t.Errorf("host exit code = %d, want 0; stderr:\n%s", code, host.stderrText())
	}
	if r := s.run("host", "status", "--root", root); r.code != 1 {
		t.Errorf("status after stop: exit %d, want 1", r.code)
	}
	assertLockFree(t, capability)

	r = s.run("host", "stop", "--root", root)
	if r.code != 1 || !strings.Contains(r.stderr, "nothing to stop") {
		t.Errorf("stop without host = %d %q, want exit 1 and a message", r.code, r.stderr)
	}

	missing := filepath.Join(t.TempDir(), "missing")
	r = s.run("host", "stop", "--root", missing)
	if r.code != 1 || !strings.Contains(r.stderr, missing) {
		t.Errorf("stop on a missing root = %d %q, want exit 1 naming the root", r.code, r.stderr)
	}
	assertNotExist(t, missing, "root created by stop")
}

func TestIdleGrace(t *testing.T) {
	t.Run("exits when idle", func(t *testing.T) {
		s := newSandbox(t)
		root, capability := newRoot(t)
		host := s.start("host", "serve", "--root", root, "--idle-grace", "200ms")
		if code := host.waitExit(); code != 0 {
			t.Fatalf("exit code = %d, want 0; stderr:\n%s", code, host.stderrText())
		}
		if !strings.Contains(host.stderrText(), "runtime host ready") {
			t.Errorf("host exited without becoming ready; stderr:\n%s", host.stderrText())
		}
		if _, found := readRegistration(t, capability.RootID()); found {
			t.Error("registration left behind after idle exit")
		}
		if dirs := endpointDirs(t, capability.RootID()); len(dirs) != 0 {
			t.Errorf("endpoint directories left behind: %v", dirs)
		}
		assertLockFree(t, capability)
	})
	t.Run("zero never exits", func(t *testing.T) {
		s := newSandbox(t)
		root, _ := newRoot(t)
		host := s.serve(root, "--idle-grace", "0")
		timer := time.NewTimer(time.Second)
		defer timer.Stop()
		select {
		case <-host.exited:
			t.Fatalf("host with --idle-grace 0 exited with %d; stderr:\n%s", host.cmd.ProcessState.ExitCode(), host.stderrText())
		case <-timer.C:
		}
		connect(t, root)
	})
}

func TestUsage(t *testing.T) {
	s := newSandbox(t)

	r := s.run("version")
	if r.code != 0 || r.stdout != "maka "+cli.Version+"\n" {
		t.Errorf("version = %d %q, want 0 %q", r.code, r.stdout, "maka "+cli.Version+"\n")
	}

	untouched := filepath.Join(t.TempDir(), "untouched")
	for _, args := range [][]string{
		{"--bogus"},
		{"bogus"},
		{"host", "bogus"},
		{"host", "--bogus"},
		{"host", "serve", "--bogus", "--root", untouched},
		{"host", "serve", "extra", "--root", untouched},
		{"host", "status", "--bogus", "--root", untouched},
		{"host", "stop", "--wait", "soon", "--root", untouched},
		{"version", "extra"},
		{"host", "serve", "--root", untouched, "--idle-grace", "-1s"},
		{"host", "serve", "--root", untouched, "--idle-grace", "1h"},
		{"host", "serve", "--root", untouched, "--log-level", "loud"},
	} {
		r := s.run(args...)
		if r.code != 2 || !strings.HasPrefix(r.stderr, "maka: ") {
			t.Errorf("maka %s = %d %q, want exit 2 with a message", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	assertNotExist(t, untouched, "root created by a rejected command")

	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("not a root\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = s.run("host", "serve", "--root", file, "--idle-grace", "0")
	if r.code != 1 || !strings.Contains(r.stderr, file) {
		t.Errorf("serve on a regular file = %d %q, want exit 1 naming the path", r.code, r.stderr)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "not a root\n" {
		t.Errorf("regular file changed: %q %v", b, err)
	}
}

func TestMakaRootEnvironment(t *testing.T) {
	root, capability := newRoot(t)
	s := newSandbox(t, "MAKA_ROOT="+root)
	host := s.start("host", "serve", "--idle-grace", "0")
	host.waitReady()

	_, _, reg := connect(t, root)
	if reg.PID != int64(host.pid()) {
		t.Errorf("host of MAKA_ROOT has pid %d, want %d", reg.PID, host.pid())
	}
	v, code := s.statusJSON()
	if code != 0 || !v.Running || v.Root != root {
		t.Errorf("status with MAKA_ROOT = exit %d %+v, want running for %s", code, v, root)
	}
	other := filepath.Join(t.TempDir(), "other")
	if v, code := s.statusJSON("--root", other); code != 1 || v.Running || v.Root != other {
		t.Errorf("--root does not override MAKA_ROOT: exit %d %+v", code, v)
	}
	if r := s.run("host", "stop"); r.code != 0 {
		t.Fatalf("stop with MAKA_ROOT = %d %q", r.code, r.stderr)
	}
	if code := host.waitExit(); code != 0 {
		t.Errorf("host exit code = %d, want 0", code)
	}
	assertLockFree(t, capability)

	// Without MAKA_ROOT the default root lives under XDG_CONFIG_HOME.
	d := newSandbox(t)
	want := filepath.Join(d.xdg, "Maka", "workspaces", "default")
	if v, code := d.statusJSON(); code != 1 || v.Running || v.Root != want {
		t.Errorf("default root status = exit %d %+v, want not running for %s", code, v, want)
	}
	assertNotExist(t, want, "default root created by status")
}
