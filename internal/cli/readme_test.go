package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"

	"github.com/maka-agent/maka/internal/modeltest"
)

// readmeBlock returns the statements of the first sh code block after the
// heading (the whole file's first block when heading is ""), comments
// dropped, one per README line.
func readmeBlock(t *testing.T, heading string) []*syntax.Stmt {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if heading != "" {
		i := strings.Index(text, "\n"+heading+"\n")
		if i < 0 {
			t.Fatalf("README.md has no %q heading", heading)
		}
		text = text[i:]
	}
	start := strings.Index(text, "```sh\n")
	if start < 0 {
		t.Fatalf("no sh code block after %q", heading)
	}
	text = text[start+len("```sh\n"):]
	end := strings.Index(text, "\n```")
	if end < 0 {
		t.Fatal("the code block does not end")
	}
	f, err := syntax.NewParser().Parse(strings.NewReader(text[:end]), "README.md")
	if err != nil {
		t.Fatalf("the walkthrough is not valid shell: %v", err)
	}
	return f.Stmts
}

// words are the expanded words of a simple command (nil for another kind
// of statement, a pipe among them).
func words(t *testing.T, st *syntax.Stmt) []string {
	t.Helper()
	call, ok := st.Cmd.(*syntax.CallExpr)
	if !ok {
		return nil
	}
	var out []string
	for _, a := range call.Assigns {
		v := ""
		if a.Value != nil {
			var err error
			if v, err = expand.Literal(nil, a.Value); err != nil {
				t.Fatalf("cannot read %s: %v", a.Name.Value, err)
			}
		}
		out = append(out, a.Name.Value+"="+v)
	}
	fields, err := expand.Fields(nil, call.Args...)
	if err != nil {
		t.Fatalf("cannot read a command's words: %v", err)
	}
	return append(out, fields...)
}

func printed(st *syntax.Stmt) string {
	var b strings.Builder
	_ = syntax.NewPrinter().Print(&b, st)
	return b.String()
}

// walkthrough runs the README's commands against the fake model.
type walkthrough struct {
	t       *testing.T
	s       *sandbox
	bin     string // directory of the executables the build lines make
	ws      string
	srv     *modeltest.Server
	session string
}

// env is the sandbox's environment with the built executables first on
// PATH.
func (w *walkthrough) env() []string {
	env := []string{}
	for _, kv := range w.s.env {
		if !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	return append(env, "PATH="+w.bin+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// bash runs one command line as written, in the workspace.
func (w *walkthrough) bash(line string) result {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", line)
	cmd.Env, cmd.Dir = w.env(), w.ws
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	var ee *exec.ExitError
	if err := cmd.Run(); err != nil && !errors.As(err, &ee) {
		w.t.Fatalf("%s: %v", line, err)
	}
	if ctx.Err() != nil {
		w.t.Fatalf("%s did not finish within %v; stderr:\n%s", line, commandTimeout, stderr.String())
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// build makes the executables a go install / go build line names: maka
// is the test-built binary, any other ./cmd/NAME is built here.
func (w *walkthrough) build(args []string) {
	w.t.Helper()
	var pkgs []string
	for _, a := range args[2:] {
		switch {
		case a == "./cmd/...":
			dirs, _ := filepath.Glob(filepath.Join("..", "..", "cmd", "*"))
			for _, d := range dirs {
				pkgs = append(pkgs, "./cmd/"+filepath.Base(d))
			}
		case strings.HasPrefix(a, "./"):
			pkgs = append(pkgs, a)
		}
	}
	if len(pkgs) == 0 {
		w.t.Fatalf("%q builds no package of this repository", strings.Join(args, " "))
	}
	for _, p := range pkgs {
		if _, err := os.Stat(filepath.Join("..", "..", p)); err != nil {
			w.t.Fatalf("%q names %s, which does not exist", strings.Join(args, " "), p)
		}
		name := filepath.Base(p)
		if name == "maka" {
			continue
		}
		out := filepath.Join(w.bin, name)
		build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", out, "github.com/maka-agent/maka/"+strings.TrimPrefix(p, "./"))
		build.Env = append(os.Environ(), "GOTOOLCHAIN=local")
		if b, err := build.CombinedOutput(); err != nil {
			w.t.Fatalf("go build %s: %v\n%s", p, err, b)
		}
	}
}

// connectionAdd runs a connection add line against the fake model: its
// --base-url is the fake's, and a --key-env variable is set.
func (w *walkthrough) connectionAdd(args []string) result {
	w.t.Helper()
	var out []string
	env := w.env()
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--base-url" && i+1 < len(args):
			i++
		case strings.HasPrefix(a, "--base-url="):
		case a == "--key-env" && i+1 < len(args):
			env = append(env, args[i+1]+"=sk-readme-test")
			out = append(out, a)
		default:
			out = append(out, a)
		}
	}
	out = append(out, "--base-url", w.srv.BaseURL())
	cmd := exec.Command(filepath.Join(w.bin, out[0]), out[1:]...)
	cmd.Env, cmd.Dir = env, w.ws
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_ = cmd.Run()
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// TestReadmeWalkthrough runs the README's walkthrough as written with the
// test-built binary against the fake model: every command exits as the
// README implies and prints what it implies; the terminal UI lines run in
// tmux (skipped without it).
func TestReadmeWalkthrough(t *testing.T) {
	srv := modeltest.New(t, func(req *modeltest.Request) modeltest.Reply {
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "answer to: " + oneLineOf(req.LastUser())}}}
	})
	s := newSandbox(t)
	w := &walkthrough{t: t, s: s, bin: filepath.Dir(makaBin), srv: srv, ws: gitWorkspace(t)}
	root := filepath.Join(s.xdg, "Maka", "workspaces", "default")
	t.Cleanup(func() {
		s.run("host", "stop", "--root", root)
		if _, err := os.Stat(filepath.Join(root, ".maka-storage-root.json")); err == nil {
			cleanupRootID(t, rootIDOf(t, root))
		}
	})
	ran := map[string]bool{}
	for _, st := range readmeBlock(t, "## Walkthrough") {
		line := printed(st)
		args := words(t, st)
		if w.session != "" {
			line = strings.ReplaceAll(line, "SESSION", w.session)
			for i, a := range args {
				if a == "SESSION" {
					args[i] = w.session
				}
			}
		}
		t.Logf("$ %s", line)
		var r result
		switch {
		case len(args) >= 2 && args[0] == "export":
			s.env = append(s.env, args[1:]...)
			continue
		case len(args) >= 2 && args[0] == "go" && (args[1] == "install" || args[1] == "build"):
			w.build(args)
			continue
		case len(args) >= 3 && args[0] == "maka" && args[1] == "connection" && args[2] == "add":
			r = w.connectionAdd(args)
			if r.code != 0 || !strings.Contains(r.stdout, "added connection "+args[3]) {
				t.Fatalf("%s = %d\nstdout %s\nstderr %s", line, r.code, r.stdout, r.stderr)
			}
			ran["connection add"] = true
			continue
		case len(args) >= 1 && args[0] == "maka" && (len(args) == 1 || strings.HasPrefix(args[1], "-")):
			w.tui(line, args)
			ran["tui"] = true
			continue
		case len(args) >= 2 && args[0] == "maka" && args[1] == "attach":
			w.attach(args)
			ran["attach"] = true
			continue
		}
		r = w.bash(line)
		if r.code != 0 {
			t.Fatalf("%s = %d\nstdout %s\nstderr %s", line, r.code, r.stdout, r.stderr)
		}
		w.check(line, args, r)
		ran[strings.Join(args[:min(len(args), 2)], " ")] = true
	}
	for _, want := range []string{"connection add", "maka run", "maka sessions", "attach", "maka compact"} {
		if !ran[want] {
			t.Errorf("the walkthrough has no %s line any more; this test no longer covers it", want)
		}
	}
}

// check asserts what a command prints.
func (w *walkthrough) check(line string, args []string, r result) {
	w.t.Helper()
	switch {
	case strings.Contains(line, "| maka run - --json"):
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		var last map[string]any
		for _, l := range lines {
			last = nil
			if err := json.Unmarshal([]byte(l), &last); err != nil || last["v"] != 1.0 {
				w.t.Fatalf("%s: not a v1 JSON event: %q", line, l)
			}
		}
		if last["type"] != "result" || last["status"] != "completed" || !strings.Contains(fmt.Sprint(last["text"]), "answer to: diff --git") {
			w.t.Fatalf("%s: last event %v, want a completed result answering the diff", line, last)
		}
	case len(args) >= 2 && args[1] == "run":
		if !strings.HasPrefix(r.stdout, "answer to: ") {
			w.t.Fatalf("%s printed %q, want the model's answer on stdout", line, r.stdout)
		}
		if w.session == "" {
			w.session = w.latestSession()
		}
	case len(args) >= 3 && args[1] == "connection" && args[2] == "list":
		for _, slug := range []string{"openai", "ollama"} {
			if !strings.Contains(r.stdout, slug) {
				w.t.Fatalf("%s does not list %s:\n%s", line, slug, r.stdout)
			}
		}
	case len(args) == 2 && args[1] == "sessions":
		if w.session == "" || !strings.Contains(r.stdout, w.session[:8]) {
			w.t.Fatalf("%s does not list the session %s:\n%s", line, w.session, r.stdout)
		}
	case len(args) >= 2 && args[1] == "compact":
		if !strings.Contains(r.stdout+r.stderr, "compact") {
			w.t.Fatalf("%s says nothing of a compaction:\nstdout %s\nstderr %s", line, r.stdout, r.stderr)
		}
	}
}

// latestSession is the id of the session the walkthrough's runs use.
func (w *walkthrough) latestSession() string {
	w.t.Helper()
	r := w.bash("maka sessions list --json")
	var listed struct {
		Sessions []struct {
			SessionID string `json:"sessionId"`
		} `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || len(listed.Sessions) == 0 {
		w.t.Fatalf("sessions list --json = %d: %v\n%s", r.code, err, r.stdout)
	}
	return listed.Sessions[0].SessionID
}

// attach follows the session until it says it is attached, then is
// interrupted as a person would, and exits 0.
func (w *walkthrough) attach(args []string) {
	w.t.Helper()
	lp := w.s.startLines(args[1:]...)
	waitStderr(w.t, lp, "attached to session "+w.session)
	if err := lp.cmd.Process.Signal(syscall.SIGINT); err != nil {
		w.t.Fatal(err)
	}
	if _, code := lp.rest(w.t); code != 0 {
		w.t.Fatalf("maka attach after Ctrl-C exit %d, want 0; stderr %q", code, lp.stderrText())
	}
}

// tui runs a terminal UI line in tmux: it comes up (showing the resumed
// session's first prompt) and quits with Ctrl-D.
func (w *walkthrough) tui(line string, args []string) {
	w.t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		w.t.Logf("skipped %q: tmux is not installed", line)
		return
	}
	m := &tmux{t: w.t, name: fmt.Sprintf("maka-readme-%d", os.Getpid()), env: append(w.env(), "TERM=xterm-256color")}
	w.t.Cleanup(func() { _ = exec.Command("tmux", "kill-session", "-t", m.name).Run() })
	m.cmd("new-session", "-d", "-s", m.name, "-x", "120", "-y", "40", "-c", w.ws, "--", "bash", "-c", line)
	if len(args) > 1 && args[1] == "--resume" {
		m.waitFor("now add a test for it", "answer to: now add a test for it")
	} else {
		m.waitFor("New session in")
	}
	m.cmd("send-keys", "-t", m.name, "C-d")
	waitTmuxExit(m)
}

// waitTmuxExit waits for the program in m's session to end, and the
// session with it (a bounded poll of an external terminal, like waitFor).
func waitTmuxExit(m *tmux) {
	m.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for exec.Command("tmux", "has-session", "-t", m.name).Run() == nil {
		if time.Now().After(deadline) {
			m.t.Fatalf("the UI did not quit; it shows:\n%s", m.cmd("capture-pane", "-p", "-t", m.name))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gitWorkspace is a git repository with an uncommitted change, so that
// 'git diff' has something to say.
func gitWorkspace(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) {
		c := exec.Command("git", args...)
		c.Dir = dir
		c.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		if b, err := c.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, b)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run("init", "-q")
	run("add", ".")
	run("commit", "-qm", "start")
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func oneLineOf(s string) string { return strings.ReplaceAll(s, "\n", " ") }

// TestReadmeBuildAndServe runs the README's first command as written with
// the test-built binary: its build names this repository's command, the
// host it serves stays up (status: running) and Ctrl-C ends it with exit
// 0. The second command, the test suite, is what runs this test.
func TestReadmeBuildAndServe(t *testing.T) {
	stmts := readmeBlock(t, "")
	if len(stmts) < 2 {
		t.Fatalf("the README's first block has %d commands, want build+serve and the tests", len(stmts))
	}
	and, ok := stmts[0].Cmd.(*syntax.BinaryCmd)
	if !ok || and.Op != syntax.AndStmt {
		t.Fatalf("the first command is %q, want BUILD && SERVE", printed(stmts[0]))
	}
	build, serve := words(t, and.X), words(t, and.Y)
	for len(build) > 0 && strings.Contains(build[0], "=") {
		build = build[1:] // GOTOOLCHAIN=...
	}
	if len(build) < 3 || build[0] != "go" || build[1] != "build" {
		t.Fatalf("the build is %q", build)
	}
	out := ""
	for i, a := range build {
		if a == "-o" && i+1 < len(build) {
			out = build[i+1]
		}
	}
	served := "./" + out // -o FILE
	if out == "." || strings.HasSuffix(out, "/") {
		served = "./" + path.Join(out, "maka") // -o DIR: the executables by their package names
	}
	if len(serve) < 3 || serve[0] != served || serve[1] != "host" || serve[2] != "serve" {
		t.Fatalf("the serve part %q does not run the built %q", serve, out)
	}
	w := &walkthrough{t: t, bin: t.TempDir()}
	w.build(build)

	s := newSandbox(t)
	root := filepath.Join(s.xdg, "Maka", "workspaces", "default")
	host := s.start(serve[1:]...)
	host.waitReady()
	t.Cleanup(func() { cleanupRootID(t, rootIDOf(t, root)) })
	if r := s.run("host", "status"); r.code != 0 || !strings.Contains(r.stdout, "running (ready)") {
		t.Fatalf("host status = %d %q while the README's host serves", r.code, r.stdout)
	}
	if err := host.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := host.waitExit(); code != 0 {
		t.Fatalf("exit code after Ctrl-C = %d, want 0; stderr:\n%s", code, host.stderrText())
	}
}
