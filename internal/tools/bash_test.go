package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/internal/proctest"
	"github.com/maka-agent/maka/internal/sandbox"
)

// terminal decodes a terminal result.
type terminal struct {
	Kind       string `json:"kind"`
	Cwd        string `json:"cwd"`
	Cmd        string `json:"cmd"`
	Status     string `json:"status"`
	ExitCode   int    `json:"exitCode"`
	DurationMS int64  `json:"durationMs"`
	Output     struct {
		Mode            string `json:"mode"`
		Stdout          string `json:"stdout"`
		Stderr          string `json:"stderr"`
		StdoutTruncated bool   `json:"stdoutTruncated"`
		StderrTruncated bool   `json:"stderrTruncated"`
		Redacted        bool   `json:"redacted"`
	} `json:"output"`
}

func decodeTerminal(t *testing.T, r Result) terminal {
	t.Helper()
	var tm terminal
	if err := json.Unmarshal(r.Content, &tm); err != nil || tm.Kind != "terminal" || tm.Output.Mode != "pipes" {
		t.Fatalf("not a terminal result: %s (%v)", r.Content, err)
	}
	if r.IsError != (tm.Status != TerminalCompleted) {
		t.Fatalf("IsError %v with status %s", r.IsError, tm.Status)
	}
	return tm
}

// processGone reports whether pid has exited, waiting up to 5 s for the
// exit through a pidfd (a process that closed its pipes can still be
// finishing its exit). kill(pid, 0) must then fail with ESRCH, or the
// process must be a zombie awaiting its reaper.
func processGone(pid int) bool {
	if fd, err := unix.PidfdOpen(pid, 0); err == nil {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			_, err := unix.Poll(fds, 5000)
			if err != unix.EINTR {
				break
			}
		}
		unix.Close(fd)
	}
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}

// firstPID parses the first line of s as a pid.
func firstPID(t *testing.T, s string) int {
	t.Helper()
	line, _, _ := strings.Cut(s, "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 1 {
		t.Fatalf("no pid in output %q", s)
	}
	return pid
}

func TestBashExitCodes(t *testing.T) {
	env := newEnv(t)
	tests := []struct {
		name, cmd      string
		status         string
		code           int
		stdout, stderr string
	}{
		{"success", "echo hi", TerminalCompleted, 0, "hi\n", ""},
		{"failure", "echo out; echo err >&2; exit 3", TerminalFailed, 3, "out\n", "err\n"},
		{"signal", "kill -TERM $$", TerminalFailed, 128 + int(syscall.SIGTERM), "", ""},
		{"cwd is the workspace", "pwd", TerminalCompleted, 0, env.Workspace + "\n", ""},
		{"stdin is empty", "cat; echo done", TerminalCompleted, 0, "done\n", ""},
		{"own process group", "ps -o pgid= -p $$ | tr -d ' '; echo $$", TerminalCompleted, 0, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, byName(t, NameBash), env, map[string]any{"command": tt.cmd})
			tm := decodeTerminal(t, r)
			if tm.Status != tt.status || tm.ExitCode != tt.code {
				t.Fatalf("status %s code %d, want %s %d: %s", tm.Status, tm.ExitCode, tt.status, tt.code, r.Content)
			}
			if tt.name == "own process group" {
				f := strings.Fields(tm.Output.Stdout)
				if len(f) != 2 || f[0] != f[1] {
					t.Errorf("pgid/pid %q: not a group leader", tm.Output.Stdout)
				}
				return
			}
			if tm.Output.Stdout != tt.stdout || tm.Output.Stderr != tt.stderr {
				t.Errorf("stdout %q stderr %q", tm.Output.Stdout, tm.Output.Stderr)
			}
			if tm.Cwd != env.Workspace || tm.Cmd != tt.cmd {
				t.Errorf("cwd %q cmd %q", tm.Cwd, tm.Cmd)
			}
			if !strings.HasPrefix(r.ModelText, fmt.Sprintf("Exit code: %d\n", tt.code)) {
				t.Errorf("model text %q", r.ModelText)
			}
			if tt.stderr != "" && !strings.Contains(r.ModelText, "stderr:\n"+strings.TrimSuffix(tt.stderr, "\n")) {
				t.Errorf("model text %q lacks stderr", r.ModelText)
			}
		})
	}
}

func TestBashTimeoutKillsProcessGroup(t *testing.T) {
	env := newEnv(t)
	r := run(t, byName(t, NameBash), env, map[string]any{"command": "sleep 30 & echo $!; sleep 5", "timeout_ms": 200})
	tm := decodeTerminal(t, r)
	if tm.Status != TerminalTimedOut || tm.ExitCode != ExitCodeTimedOut || !r.IsError {
		t.Fatalf("got %s", r.Content)
	}
	if pid := firstPID(t, tm.Output.Stdout); !processGone(pid) {
		t.Errorf("background child %d survived the timeout", pid)
	}
	if tm.DurationMS >= 5000 {
		t.Errorf("took %d ms", tm.DurationMS)
	}
	if !strings.Contains(r.ModelText, "timed out after 200 ms") {
		t.Errorf("model text %q", r.ModelText)
	}
}

func TestBashTimeoutEscalatesToSIGKILL(t *testing.T) {
	env := newEnv(t)
	r := run(t, byName(t, NameBash), env, map[string]any{
		"command": "trap '' TERM; sleep 30 & echo $!; sleep 30", "timeout_ms": 100})
	tm := decodeTerminal(t, r)
	if tm.Status != TerminalTimedOut || tm.ExitCode != ExitCodeTimedOut {
		t.Fatalf("got %s", r.Content)
	}
	if pid := firstPID(t, tm.Output.Stdout); !processGone(pid) {
		t.Errorf("child %d ignoring SIGTERM survived", pid)
	}
	if tm.DurationMS < bashKillGrace.Milliseconds() {
		t.Errorf("SIGKILL came after %d ms, before the %v grace", tm.DurationMS, bashKillGrace)
	}
}

func TestBashCancel(t *testing.T) {
	env := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	var once sync.Once
	env.Output = func(stream, chunk string) {
		if strings.Contains(chunk, "ready") {
			once.Do(func() { close(started) })
		}
	}
	done := make(chan Result, 1)
	go func() {
		res, _ := byName(t, NameBash).Run(ctx, env, json.RawMessage(`{"command":"sleep 30 & echo $!; echo ready; sleep 30"}`))
		done <- res
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("command did not start")
	}
	cancel()
	var r Result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	tm := decodeTerminal(t, r)
	if tm.Status != TerminalAborted || tm.ExitCode != ExitCodeAborted || !r.IsError {
		t.Fatalf("got %s", r.Content)
	}
	if pid := firstPID(t, tm.Output.Stdout); !processGone(pid) {
		t.Errorf("background child %d survived the abort", pid)
	}
}

func TestBashCancelledBeforeStart(t *testing.T) {
	env := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := runCtx(t, ctx, byName(t, NameBash), env, map[string]any{"command": "touch marker"})
	tm := decodeTerminal(t, r)
	if tm.Status != TerminalAborted || tm.ExitCode != ExitCodeAborted {
		t.Fatalf("got %s", r.Content)
	}
	if _, err := os.Stat(filepath.Join(env.Workspace, "marker")); err == nil {
		t.Error("command ran")
	}
}

func TestBashBackgroundHolderDoesNotHang(t *testing.T) {
	env := newEnv(t)
	r := run(t, byName(t, NameBash), env, map[string]any{"command": "sleep 30 & echo $!"})
	tm := decodeTerminal(t, r)
	pid := firstPID(t, tm.Output.Stdout)
	defer syscall.Kill(pid, syscall.SIGKILL)
	if tm.Status != TerminalCompleted || tm.ExitCode != 0 {
		t.Fatalf("got %s", r.Content)
	}
	if tm.DurationMS >= 10000 {
		t.Errorf("waited %d ms for a background process", tm.DurationMS)
	}
	// The background job did not outlive the call.
	if !processGone(pid) {
		t.Errorf("background process %d outlived the call", pid)
	}
}

func TestBashLiveOutput(t *testing.T) {
	env := newEnv(t)
	var mu sync.Mutex
	chunks := map[string][]string{}
	active := 0
	env.Output = func(stream, chunk string) {
		mu.Lock()
		active++
		if active > 1 {
			t.Error("overlapping Output calls")
		}
		chunks[stream] = append(chunks[stream], chunk)
		active--
		mu.Unlock()
	}
	cmd := "printf 'a\\nb\\n'; echo e1 >&2; head -c 20000 /dev/zero | tr '\\0' x; echo; echo sk-abcdefghijklmnopqrstuvwx; printf tail"
	r := run(t, byName(t, NameBash), env, map[string]any{"command": cmd})
	tm := decodeTerminal(t, r)
	mu.Lock()
	defer mu.Unlock()
	out := strings.Join(chunks["stdout"], "")
	if out != tm.Output.Stdout {
		t.Errorf("live stdout (%d bytes) differs from result stdout (%d bytes)", len(out), len(tm.Output.Stdout))
	}
	if strings.Join(chunks["stderr"], "") != "e1\n" {
		t.Errorf("stderr chunks %q", chunks["stderr"])
	}
	if !strings.Contains(out, "[REDACTED]") || strings.Contains(out, "sk-abc") || !tm.Output.Redacted {
		t.Errorf("secret not redacted (redacted=%v)", tm.Output.Redacted)
	}
	for i, c := range chunks["stdout"] {
		if len(c) > BashChunkBytes {
			t.Errorf("chunk %d has %d bytes", i, len(c))
		}
		last := i == len(chunks["stdout"])-1
		if !last && !strings.HasSuffix(c, "\n") && len(c) != BashChunkBytes {
			t.Errorf("chunk %d is a partial line of %d bytes", i, len(c))
		}
	}
	if lastChunk := chunks["stdout"][len(chunks["stdout"])-1]; lastChunk != "tail" && !strings.HasSuffix(lastChunk, "\ntail") {
		t.Errorf("final partial line not flushed: %q", lastChunk)
	}
}

func TestBashOutputTruncation(t *testing.T) {
	env := newEnv(t)
	bash := byName(t, NameBash)
	t.Run("lines", func(t *testing.T) {
		tm := decodeTerminal(t, run(t, bash, env, map[string]any{"command": "seq 1 5000"}))
		out := tm.Output.Stdout
		hint, body, _ := strings.Cut(out, "\n")
		if !tm.Output.StdoutTruncated || !strings.HasPrefix(hint, "[output truncated") || !strings.Contains(hint, "3000 earlier lines") {
			t.Errorf("hint %q truncated=%v", hint, tm.Output.StdoutTruncated)
		}
		if !strings.HasPrefix(body, "3001\n") || !strings.HasSuffix(body, "\n5000\n") || strings.Count(body, "\n") != BashResultLines {
			t.Errorf("body starts %.10q, %d lines", body, strings.Count(body, "\n"))
		}
		if tm.Output.StderrTruncated {
			t.Error("stderr marked truncated")
		}
	})
	t.Run("bytes", func(t *testing.T) {
		tm := decodeTerminal(t, run(t, bash, env, map[string]any{"command": "head -c 200000 /dev/zero | tr '\\0' z; echo; echo end >&2"}))
		hint, body, _ := strings.Cut(tm.Output.Stdout, "\n")
		if !tm.Output.StdoutTruncated || !strings.HasPrefix(hint, "[output truncated") || len(body) > BashResultBytes {
			t.Errorf("hint %q, body %d bytes", hint, len(body))
		}
		if tm.Output.Stderr != "end\n" || tm.Output.StderrTruncated {
			t.Errorf("stderr %q", tm.Output.Stderr)
		}
	})
	t.Run("retained tail", func(t *testing.T) {
		tm := decodeTerminal(t, run(t, bash, env, map[string]any{"command": "head -c 1200000 /dev/zero | tr '\\0' z; echo last"}))
		if !tm.Output.StdoutTruncated || !strings.Contains(tm.Output.Stdout, "discarded") || !strings.HasSuffix(tm.Output.Stdout, "last\n") {
			t.Errorf("stdout %d bytes: %.200q", len(tm.Output.Stdout), tm.Output.Stdout)
		}
	})
}

func TestBashTimeoutArgument(t *testing.T) {
	ms := func(v int64) *int64 { return &v }
	tests := []struct {
		in   *int64
		want time.Duration
		err  bool
	}{
		{nil, BashDefaultTimeout, false},
		{ms(1500), 1500 * time.Millisecond, false},
		{ms(600000), BashMaxTimeout, false},
		{ms(1 << 60), BashMaxTimeout, false},
		{ms(0), 0, true},
		{ms(-5), 0, true},
	}
	for _, tt := range tests {
		got, err := bashTimeout(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("bashTimeout(%v) = %v, %v", tt.in, got, err)
		}
	}
}

func TestTailBuffer(t *testing.T) {
	tb := tailBuffer{max: 10}
	tb.write([]byte("0123456"))
	if b, dropped := tb.bytes(); string(b) != "0123456" || dropped {
		t.Fatalf("%q %v", b, dropped)
	}
	for i := 0; i < 5; i++ {
		tb.write([]byte("abcdefg"))
	}
	if b, dropped := tb.bytes(); string(b) != "efgabcdefg" || !dropped {
		t.Fatalf("%q %v", b, dropped)
	}
	tb.write([]byte("0123456789XY"))
	if b, _ := tb.bytes(); string(b) != "23456789XY" {
		t.Fatalf("%q", b)
	}
}

func TestLineChunker(t *testing.T) {
	var got []string
	lc := lineChunker{emit: func(c []byte) { got = append(got, string(c)) }}
	lc.write([]byte("ab"))
	lc.write([]byte("c\nde"))
	lc.write([]byte("f\ng\n"))
	if strings.Join(got, "|") != "abc\n|def\ng\n" {
		t.Fatalf("%q", got)
	}
	got = nil
	long := strings.Repeat("é", BashChunkBytes) // 2 bytes each
	lc.write([]byte(long))
	lc.flush()
	if strings.Join(got, "") != long {
		t.Fatal("content changed")
	}
	for _, c := range got {
		if len(c) > BashChunkBytes || !strings.HasPrefix(c, "é") {
			t.Fatalf("bad chunk of %d bytes", len(c))
		}
	}
}

func TestTailTruncate(t *testing.T) {
	if out, tr := tailTruncate("a\nb\n", 2, 100, false); out != "a\nb\n" || tr {
		t.Errorf("%q %v", out, tr)
	}
	if out, tr := tailTruncate("a\nb\nc", 2, 100, false); !tr || !strings.HasSuffix(out, "]\nb\nc") {
		t.Errorf("%q %v", out, tr)
	}
	if out, tr := tailTruncate("x", 2, 100, true); !tr || !strings.HasSuffix(out, "]\nx") {
		t.Errorf("%q %v", out, tr)
	}
}

func TestBashNothingOutlivesTheCall(t *testing.T) {
	tests := []struct {
		name, then string
		timeoutMS  int
		status     string
	}{
		{"returns", "exit 0", 0, TerminalCompleted},
		{"times out", "sleep 1000", 3000, TerminalTimedOut},
		{"ignores SIGTERM and times out", "trap '' TERM; sleep 1000", 3000, TerminalTimedOut},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newEnv(t)
			marker := fmt.Sprintf("maka-tools-test-%d-%d", os.Getpid(), i)
			args := map[string]any{"command": proctest.EscapingCommand(marker, tt.then)}
			if tt.timeoutMS > 0 {
				args["timeout_ms"] = tt.timeoutMS
			}
			r := run(t, byName(t, NameBash), env, args)
			tm := decodeTerminal(t, r)
			if tm.Status != tt.status || !strings.Contains(tm.Output.Stdout, "started") {
				t.Fatalf("got %s", r.Content)
			}
			if pids := proctest.Marked(t, marker); len(pids) > 0 {
				for _, pid := range pids {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
				t.Errorf("processes %v outlived the call", pids)
			}
		})
	}
}

func TestBashStopEndsEveryProcess(t *testing.T) {
	env := newEnv(t)
	marker := fmt.Sprintf("maka-tools-test-%d-stop", os.Getpid())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	var once sync.Once
	env.Output = func(stream, chunk string) {
		if strings.Contains(chunk, "started") {
			once.Do(func() { close(started) })
		}
	}
	done := make(chan Result, 1)
	raw, _ := json.Marshal(map[string]any{"command": proctest.EscapingCommand(marker, "sleep 1000")})
	go func() {
		res, _ := byName(t, NameBash).Run(ctx, env, raw)
		done <- res
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("command did not start")
	}
	if n := len(proctest.Marked(t, marker)); n < 4 {
		t.Fatalf("%d escaped processes run, want 4", n)
	}
	cancel()
	var r Result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if tm := decodeTerminal(t, r); tm.Status != TerminalAborted {
		t.Fatalf("got %s", r.Content)
	}
	if pids := proctest.Marked(t, marker); len(pids) > 0 {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		t.Errorf("processes %v outlived the stop", pids)
	}
}

func TestBashSandbox(t *testing.T) {
	st := sandbox.Status()
	t.Logf("landlock: available %v, ABI %d, reason %q", st.Available, st.ABI, st.Reason)
	if !st.Available {
		t.Skipf("landlock unavailable: %s", st.Reason)
	}
	env := newEnv(t)
	creds := writeFile(t, env, "creds.json", "secret\n")
	writeFile(t, env, "src/notes.txt", "notes\n")
	out := outside(t, env)
	env.Protected = []string{creds}
	// The temporary directory is writable: give the call one of its own,
	// so that "outside" is outside everything writable.
	env.Sandbox = sandbox.Policy{Mode: sandbox.WorkspaceWrite, TempDir: t.TempDir()}

	r := run(t, byName(t, NameBash), env, map[string]any{"command": "cat src/notes.txt && echo new > src/new.txt && cat src/new.txt"})
	if tm := decodeTerminal(t, r); tm.Status != TerminalCompleted || tm.Output.Stdout != "notes\nnew\n" {
		t.Fatalf("got %s", r.Content)
	}
	for _, cmd := range []string{"cat creds.json", "echo x > " + filepath.Join(out, "f")} {
		r = run(t, byName(t, NameBash), env, map[string]any{"command": cmd})
		tm := decodeTerminal(t, r)
		if tm.Status != TerminalFailed || strings.Contains(tm.Output.Stdout, "secret") {
			t.Fatalf("%q: got %s", cmd, r.Content)
		}
		if !strings.Contains(r.ModelText, `re-run it with "sandbox": false`) ||
			!strings.Contains(r.ModelText, "workspace-write sandbox") {
			t.Errorf("%q: model text lacks the sandbox hint: %q", cmd, r.ModelText)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "f")); err == nil {
		t.Error("the confined command wrote outside the workspace")
	}
	// Unconfined, the same failure carries no hint.
	env.Sandbox = sandbox.Policy{}
	r = run(t, byName(t, NameBash), env, map[string]any{"command": "echo denied: Permission denied >&2; exit 1"})
	if strings.Contains(r.ModelText, `"sandbox": false`) {
		t.Errorf("hint without a sandbox: %q", r.ModelText)
	}
}

func TestBashDescription(t *testing.T) {
	d := byName(t, NameBash).Description()
	for _, want := range []string{"outlives", "setsid", "sandboxed", "workspace-write", "read-only", "no network"} {
		if !strings.Contains(d, want) {
			t.Errorf("description lacks %q: %s", want, d)
		}
	}
}

// TestLiveOutputNeverSplitsAToken: a line longer than a live chunk is cut
// at a blank, so a token near the cut is redacted whole in the live output
// as in the result.
func TestLiveOutputNeverSplitsAToken(t *testing.T) {
	env := newEnv(t)
	var mu sync.Mutex
	var chunks []string
	env.Output = func(_, chunk string) { mu.Lock(); chunks = append(chunks, chunk); mu.Unlock() }
	tok := "ghp_" + strings.Repeat("A1b2C3d4E5", 3) + "f6g7h8"
	for _, pad := range []int{8170, 8179, 8185, 8190} {
		chunks = nil
		cmd := fmt.Sprintf("printf '%%s %%s\\n' $(printf 'x%%.0s' $(seq %d)) %s", pad, tok)
		res := run(t, byName(t, NameBash), env, map[string]any{"command": cmd})
		mu.Lock()
		all := strings.Join(chunks, "")
		mu.Unlock()
		if strings.Contains(res.ModelText, tok) || strings.Contains(all, tok) || strings.Contains(all, tok[:16]) {
			t.Fatalf("pad %d: a token reached the live output (%d chunks)", pad, len(chunks))
		}
		if !strings.Contains(all, "[REDACTED]") {
			t.Fatalf("pad %d: the live output lost the line", pad)
		}
	}
}
