//go:build linux

package sandbox

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// requireLandlock skips the test where the kernel cannot confine and logs
// the machine's answer either way.
func requireLandlock(t *testing.T) {
	t.Helper()
	st := Status()
	t.Logf("landlock: available %v, ABI %d, reason %q", st.Available, st.ABI, st.Reason)
	if !st.Available {
		t.Skipf("landlock unavailable: %s", st.Reason)
	}
}

// realTempDir is a fresh temporary directory, symlinks resolved.
func realTempDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func writeFiles(t *testing.T, files ...string) {
	t.Helper()
	for _, f := range files {
		if err := os.WriteFile(f, []byte("content of "+filepath.Base(f)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// probeScript runs op on every path and prints "<path> ok" or
// "<path> denied" per line.
func probeScript(op string, paths ...string) string {
	var b strings.Builder
	for _, p := range paths {
		fmt.Fprintf(&b, "if (%s) >/dev/null 2>&1; then echo '%s ok'; else echo '%s denied'; fi\n",
			strings.ReplaceAll(op, "PATH", "'"+p+"'"), p, p)
	}
	return b.String()
}

// probeCall runs the probe script under policy and returns path → "ok"/"denied".
func probeCall(t *testing.T, policy Policy, op string, paths ...string) map[string]string {
	t.Helper()
	code, stdout, stderr := runCall(t, Spec{Command: probeScript(op, paths...), Dir: policy.Workspace, Policy: policy})
	if code != 0 {
		t.Fatalf("probe exited %d: %s %s", code, stdout, stderr)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		i := strings.LastIndexByte(line, ' ')
		if i > 0 {
			got[line[:i]] = line[i+1:]
		}
	}
	return got
}

func wantProbe(t *testing.T, what string, got map[string]string, want map[string]string) {
	t.Helper()
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s %s: %q, want %q", what, p, got[p], w)
		}
	}
}

// layout is a workspace, a temporary directory and a directory outside
// both, side by side.
type layout struct{ ws, tmp, out string }

func newLayout(t *testing.T) layout {
	base := realTempDir(t)
	l := layout{ws: filepath.Join(base, "ws"), tmp: filepath.Join(base, "tmp"), out: filepath.Join(base, "out")}
	mkdirs(t, l.ws, l.tmp, l.out)
	return l
}

func TestLandlockWrites(t *testing.T) {
	requireLandlock(t)
	l := newLayout(t)
	mkdirs(t, filepath.Join(l.ws, "sub"))
	targets := []string{
		filepath.Join(l.ws, "a"), filepath.Join(l.ws, "sub", "b"), filepath.Join(l.tmp, "c"),
		filepath.Join(l.out, "d"), "/dev/null",
	}
	op := "echo x > PATH"
	t.Run("off", func(t *testing.T) {
		got := probeCall(t, Policy{Mode: Off, Workspace: l.ws, TempDir: l.tmp}, op, targets...)
		wantProbe(t, "unconfined write", got, map[string]string{targets[3]: "ok"})
		if err := os.Remove(targets[3]); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("workspace-write", func(t *testing.T) {
		got := probeCall(t, Policy{Mode: WorkspaceWrite, Workspace: l.ws, TempDir: l.tmp}, op, targets...)
		wantProbe(t, "write", got, map[string]string{
			targets[0]: "ok", targets[1]: "ok", targets[2]: "ok", targets[3]: "denied", "/dev/null": "ok"})
		if _, err := os.Stat(targets[3]); err == nil {
			t.Error("a file was created outside the workspace")
		}
		got = probeCall(t, Policy{Mode: WorkspaceWrite, Workspace: l.ws, TempDir: l.tmp},
			"mkdir PATH && touch PATH/f && mv PATH/f PATH/g && rm -r PATH",
			filepath.Join(l.ws, "dir"), filepath.Join(l.tmp, "dir"), filepath.Join(l.out, "dir"))
		wantProbe(t, "mkdir, rename, remove", got, map[string]string{
			filepath.Join(l.ws, "dir"): "ok", filepath.Join(l.tmp, "dir"): "ok", filepath.Join(l.out, "dir"): "denied"})
	})
	t.Run("read-only", func(t *testing.T) {
		writeFiles(t, filepath.Join(l.ws, "existing"))
		got := probeCall(t, Policy{Mode: ReadOnly, Workspace: l.ws, TempDir: l.tmp}, op,
			append(targets, filepath.Join(l.ws, "existing"))...)
		wantProbe(t, "read-only write", got, map[string]string{
			targets[0]: "denied", targets[1]: "denied", targets[2]: "denied", targets[3]: "denied",
			filepath.Join(l.ws, "existing"): "denied", "/dev/null": "ok"})
		got = probeCall(t, Policy{Mode: ReadOnly, Workspace: l.ws}, "cat PATH", filepath.Join(l.ws, "existing"))
		wantProbe(t, "read-only read", got, map[string]string{filepath.Join(l.ws, "existing"): "ok"})
	})
}

func TestLandlockHidesPaths(t *testing.T) {
	requireLandlock(t)
	l := newLayout(t)
	// A credentials file inside the workspace and one outside, a hidden
	// directory inside, each with a sibling.
	credsIn, sibIn := filepath.Join(l.ws, "creds.json"), filepath.Join(l.ws, "notes.txt")
	credsOut, sibOut := filepath.Join(l.out, "creds.json"), filepath.Join(l.out, "notes.txt")
	store := filepath.Join(l.ws, ".maka")
	storeFile := filepath.Join(store, "db")
	mkdirs(t, store, filepath.Join(l.ws, "src"))
	writeFiles(t, credsIn, sibIn, credsOut, sibOut, storeFile)
	// A symlink to a hidden file does not reach it either.
	link := filepath.Join(l.ws, "link")
	if err := os.Symlink(credsOut, link); err != nil {
		t.Fatal(err)
	}
	hidden := []string{credsIn, credsOut, store, filepath.Join(l.ws, "not-yet")}
	for _, mode := range []Mode{WorkspaceWrite, ReadOnly} {
		t.Run(string(mode), func(t *testing.T) {
			p := Policy{Mode: mode, Workspace: l.ws, TempDir: l.tmp, Hidden: hidden}
			got := probeCall(t, p, "cat PATH", credsIn, sibIn, credsOut, sibOut, storeFile, link)
			wantProbe(t, "read", got, map[string]string{
				credsIn: "denied", sibIn: "ok", credsOut: "denied", sibOut: "ok", storeFile: "denied", link: "denied"})
			got = probeCall(t, p, "ls PATH", l.ws, l.out)
			wantProbe(t, "list", got, map[string]string{l.ws: "ok", l.out: "ok"})
			got = probeCall(t, p, "echo x >> PATH", credsIn, credsOut, storeFile)
			wantProbe(t, "append", got, map[string]string{credsIn: "denied", credsOut: "denied", storeFile: "denied"})
		})
	}
	t.Run("writes around hidden paths", func(t *testing.T) {
		p := Policy{Mode: WorkspaceWrite, Workspace: l.ws, TempDir: l.tmp, Hidden: hidden}
		newTop, newSub := filepath.Join(l.ws, "new"), filepath.Join(l.ws, "src", "new")
		got := probeCall(t, p, "echo x > PATH", sibIn, newSub, newTop, filepath.Join(l.ws, "not-yet"))
		// The workspace holds hidden paths, so it keeps its existing files
		// writable but gets no new entries directly (documented).
		wantProbe(t, "write", got, map[string]string{
			sibIn: "ok", newSub: "ok", newTop: "denied", filepath.Join(l.ws, "not-yet"): "denied"})
		got = probeCall(t, p, "rm PATH", credsIn)
		wantProbe(t, "remove", got, map[string]string{credsIn: "denied"})
		got = probeCall(t, p, "mv PATH "+filepath.Join(l.ws, "src", "moved"), credsIn, storeFile)
		wantProbe(t, "move", got, map[string]string{credsIn: "denied", storeFile: "denied"})
	})
	for _, f := range []string{credsIn, credsOut, storeFile} {
		b, err := os.ReadFile(f)
		if err != nil || string(b) != "content of "+filepath.Base(f)+"\n" {
			t.Errorf("%s changed: %q %v", f, b, err)
		}
	}
}

func TestLandlockGrantsNeverCoverHiddenPaths(t *testing.T) {
	l := newLayout(t)
	mkdirs(t, filepath.Join(l.ws, "a", "b"), filepath.Join(l.ws, "c"))
	writeFiles(t, filepath.Join(l.ws, "a", "b", "secret"), filepath.Join(l.ws, "a", "x"), filepath.Join(l.out, "s"))
	hidden := []string{filepath.Join(l.ws, "a", "b", "secret"), filepath.Join(l.out, "s")}
	h := newHiddenSet(hidden)
	gs := grants(Policy{Mode: WorkspaceWrite, Workspace: l.ws, TempDir: l.tmp, Hidden: hidden})
	seen := map[string]bool{}
	for _, g := range gs {
		seen[g.path] = true
		if h.hides(g.path) {
			t.Errorf("grant %v on a hidden path", g)
		}
		if h.above(g.path) && g.access&^accessListDir != 0 {
			t.Errorf("grant %v on an ancestor of a hidden path holds more than listing", g)
		}
	}
	for _, p := range []string{filepath.Join(l.ws, "c"), filepath.Join(l.ws, "a", "x"), l.tmp, "/dev/null"} {
		if !seen[p] {
			t.Errorf("no grant on %s", p)
		}
	}
}

func TestLandlockNetwork(t *testing.T) {
	requireLandlock(t)
	if Status().ABI < 4 {
		t.Skipf("landlock ABI %d has no TCP rules", Status().ABI)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	ws := realTempDir(t)
	dial := fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d", port)
	for _, tt := range []struct {
		name    string
		network bool
		want    string
	}{{"no network", false, "denied"}, {"network", true, "ok"}} {
		t.Run(tt.name, func(t *testing.T) {
			got := probeCall(t, Policy{Mode: WorkspaceWrite, Workspace: ws, Network: tt.network}, dial, "tcp")
			// probeScript quotes PATH; the dial does not use it.
			if got["tcp"] != tt.want {
				t.Errorf("connect to 127.0.0.1:%d: %q, want %q", port, got["tcp"], tt.want)
			}
		})
	}
}

func TestLandlockSignals(t *testing.T) {
	requireLandlock(t)
	if Status().ABI < 6 {
		t.Skipf("landlock ABI %d has no signal scoping", Status().ABI)
	}
	target := exec.Command("sleep", "1000")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = target.Process.Kill()
		_ = target.Wait()
	}()
	ws := realTempDir(t)
	pid := fmt.Sprint(target.Process.Pid)
	cmd := "kill -0 " + pid + "; echo outside=$?\n" +
		"kill -TERM " + pid + "; echo term=$?\n" +
		"kill -KILL $PPID; echo helper=$?\n" +
		"sleep 1000 & kill $!; wait $!; echo own=$?\n"
	code, stdout, stderr := runCall(t, Spec{Command: cmd, Dir: ws, Policy: Policy{Mode: WorkspaceWrite, Workspace: ws}})
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	for _, want := range []string{"outside=1", "term=1", "helper=1", fmt.Sprintf("own=%d", 128+int(syscall.SIGTERM))} {
		if !strings.Contains(stdout, want+"\n") {
			t.Errorf("stdout %q lacks %q (stderr %q)", stdout, want, stderr)
		}
	}
	if !strings.Contains(stderr, "Operation not permitted") {
		t.Errorf("stderr %q", stderr)
	}
	var ws4 syscall.WaitStatus
	if pid, err := syscall.Wait4(target.Process.Pid, &ws4, syscall.WNOHANG, nil); pid != 0 || err != nil {
		t.Errorf("the process outside the call ended: %v %v", ws4, err)
	}
	// The control: unconfined, the same probe reaches it.
	code, stdout, _ = runCall(t, Spec{Command: "kill -0 " + pid + "; echo outside=$?", Dir: ws})
	if code != 0 || stdout != "outside=0\n" {
		t.Errorf("unconfined kill -0: %d %q", code, stdout)
	}
}

func TestControllingTerminalHasNoIoctlGrant(t *testing.T) {
	found := false
	for _, g := range grants(Policy{Mode: WorkspaceWrite, Workspace: t.TempDir()}) {
		if g.path != devTTY {
			continue
		}
		found = true
		if g.access&ll.AccessFSIoctlDev != 0 {
			t.Errorf("%s is granted ioctls", devTTY)
		}
		if g.access&(ll.AccessFSReadFile|ll.AccessFSWriteFile) == 0 {
			t.Errorf("%s cannot be read and written", devTTY)
		}
	}
	if !found {
		t.Errorf("no grant on %s", devTTY)
	}
}
