package cli_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tmux drives the real maka binary in a terminal.
type tmux struct {
	t    *testing.T
	name string
	env  []string
}

func (m *tmux) cmd(args ...string) string {
	m.t.Helper()
	c := exec.Command("tmux", args...)
	c.Env = m.env
	out, err := c.CombinedOutput()
	if err != nil {
		m.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// waitFor polls the pane until it shows every one of want (a bounded wait
// on an external terminal; it orders nothing in the host).
func (m *tmux) waitFor(want ...string) string {
	m.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		pane := m.cmd("capture-pane", "-p", "-t", m.name)
		missing := ""
		for _, w := range want {
			if !strings.Contains(pane, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return pane
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("the terminal never showed %q; it shows:\n%s", missing, pane)
		}
		<-tick.C
	}
}

// TestTUIInTmux types a prompt into the real terminal UI, sees the streamed
// text, approves a tool call with a keypress, sees its result, quits,
// re-opens the session and sees the same transcript.
func TestTUIInTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed")
	}
	root, _ := newRoot(t)
	ws := t.TempDir()
	script := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(script, []byte(`{"steps":[
		{"events":[{"text":"Checking the workspace."},{"toolCall":{"name":"Bash","input":{"command":"echo tmux-tool-ran > proof.txt"}}}]},
		{"events":[{"text":"The tool has finished."}]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newSandbox(t)
	m := &tmux{t: t, name: fmt.Sprintf("maka-tui-%d", os.Getpid()), env: append(s.env, "TERM=xterm-256color")}
	start := func() {
		m.cmd("new-session", "-d", "-s", m.name, "-x", "120", "-y", "40", "--", makaBin,
			"--root", root, "--cwd", ws, "--permission-mode", "ask",
			"--host-arg=--model-script="+script, "--host-arg=--idle-grace=0")
	}
	t.Cleanup(func() {
		_ = exec.Command("tmux", "kill-session", "-t", m.name).Run()
		s.run("host", "stop", "--root", root)
	})
	start()
	m.waitFor("New session in") // the UI is up
	m.cmd("send-keys", "-t", m.name, "-l", "please check")
	m.cmd("send-keys", "-t", m.name, "Enter")
	m.waitFor("Checking the workspace.", "[y] allow")
	m.cmd("send-keys", "-t", m.name, "y")
	m.waitFor("The tool has finished.")
	if b, err := os.ReadFile(filepath.Join(ws, "proof.txt")); err != nil || strings.TrimSpace(string(b)) != "tmux-tool-ran" {
		t.Fatalf("the approved command did not run: %q %v", b, err)
	}
	m.cmd("send-keys", "-t", m.name, "C-d")
	// The UI exits, and with it the tmux session.
	deadline := time.Now().Add(10 * time.Second)
	for exec.Command("tmux", "has-session", "-t", m.name).Run() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the UI did not quit; it shows:\n%s", m.cmd("capture-pane", "-p", "-t", m.name))
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Re-open the session: the same transcript.
	res := s.run("sessions", "list", "--root", root, "--json")
	if res.code != 0 {
		t.Fatalf("sessions list: %d %s", res.code, res.stderr)
	}
	var listed struct {
		Sessions []struct {
			SessionID string `json:"sessionId"`
		} `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &listed); err != nil || len(listed.Sessions) != 1 {
		t.Fatalf("sessions list --json: %v\n%s", err, res.stdout)
	}
	id := listed.Sessions[0].SessionID
	if id == "" {
		t.Fatalf("no session listed: %s", res.stdout)
	}
	m.cmd("new-session", "-d", "-s", m.name, "-x", "120", "-y", "40", "--", makaBin, "--root", root, "--resume", id)
	m.waitFor("please check", "Checking the workspace.", "The tool has finished.")
	m.cmd("send-keys", "-t", m.name, "C-d")
}

// TestTUIRefusesWithoutATerminal: `maka < /dev/null` (or with its output
// in a pipe) says why it cannot start and draws nothing.
func TestTUIRefusesWithoutATerminal(t *testing.T) {
	root, _ := newRoot(t)
	s := newSandbox(t)
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	r, err := s.execMaka(makaBin, devNull, []string{"--root", root})
	if err != nil {
		t.Fatal(err)
	}
	if r.code != 2 || !strings.Contains(r.stderr, "the terminal UI needs a terminal, and standard input is not one") ||
		!strings.Contains(r.stderr, "maka run PROMPT") || r.stdout != "" {
		t.Fatalf("maka < /dev/null = %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// paneFlags reads whether the pane is in the alternate screen and whether
// its cursor is shown.
func (m *tmux) paneFlags() (altScreen, cursorShown string) {
	m.t.Helper()
	f := strings.Fields(m.cmd("display-message", "-p", "-t", m.name, "#{alternate_on} #{cursor_flag}"))
	if len(f) != 2 {
		m.t.Fatalf("tmux flags %q", f)
	}
	return f[0], f[1]
}

// TestTUIDailyUseInTmux drives the real binary the way a person does: help,
// a setting before the first message, a two-line message, a Write approval
// that shows the content, the tool card after completion, history, Ctrl-C
// (clear, ask, quit) and a terminal left as it was found; then a host that
// goes away while the UI is open.
func TestTUIDailyUseInTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed")
	}
	root, _ := newRoot(t)
	ws := t.TempDir()
	script := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(script, []byte(`{"steps":[
		{"events":[{"text":"Writing it."},{"toolCall":{"name":"Write","input":{"path":"notes.txt","content":"alpha line\nbeta line\n"}}}]},
		{"events":[{"text":"Written."}]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newSandbox(t)
	m := &tmux{t: t, name: fmt.Sprintf("maka-tui2-%d", os.Getpid()), env: append(s.env, "TERM=xterm-256color")}
	t.Cleanup(func() {
		_ = exec.Command("tmux", "kill-session", "-t", m.name).Run()
		s.run("host", "stop", "--root", root)
	})
	// The shell stays after maka so that the terminal it left can be read.
	shell := fmt.Sprintf("%s --root %s --cwd %s --permission-mode ask --host-arg=--model-script=%s --host-arg=--idle-grace=0; echo maka-exited=$?; sleep 600",
		makaBin, root, ws, script)
	m.cmd("new-session", "-d", "-s", m.name, "-x", "120", "-y", "40", "--", "sh", "-c", shell)
	keys := func(k ...string) { m.cmd(append([]string{"send-keys", "-t", m.name}, k...)...) }
	text := func(s string) { keys("-l", s) }

	m.waitFor("New session in")
	text("?")
	m.waitFor("Commands", "/compact", "/thinking LEVEL")
	keys("Escape")
	m.waitFor("New session in")
	text("/th")
	keys("Tab")
	m.waitFor("> /thinking")
	text("high")
	keys("Enter")
	m.waitFor("thinking of the new session: high", "thinking high")
	text("first line")
	keys("C-j")
	text("second line")
	keys("Enter")
	pane := m.waitFor("Writing it.", "write notes.txt", "alpha line", "beta line", "[y] allow")
	if !strings.Contains(pane, "content (21 bytes)") {
		t.Fatalf("the approval does not show the content:\n%s", pane)
	}
	keys("y")
	m.waitFor("Written.", "⚙ Write", "✓ completed", "first line ·")
	if b, err := os.ReadFile(filepath.Join(ws, "notes.txt")); err != nil || string(b) != "alpha line\nbeta line\n" {
		t.Fatalf("notes.txt = %q %v", b, err)
	}
	keys("Up")
	m.waitFor("> first line")
	keys("C-c")
	m.waitFor("> Message maka")
	// A paste arrives whole: its newline does not send it.
	m.cmd("set-buffer", "-b", "maka-paste", "pasted one\npasted two")
	m.cmd("paste-buffer", "-p", "-b", "maka-paste", "-t", m.name)
	m.waitFor("> pasted one", "  pasted two")
	keys("C-c")
	pane = m.waitFor("> Message maka")
	if strings.Contains(pane, "› pasted one") {
		t.Fatalf("the paste was sent:\n%s", pane)
	}
	keys("C-c")
	m.waitFor("press Ctrl-C again to quit")
	keys("C-c")
	m.waitFor("maka-exited=0")
	if alt, cur := m.paneFlags(); alt != "0" || cur != "1" {
		t.Fatalf("after quitting: alternate screen %s, cursor shown %s", alt, cur)
	}

	// The session is named after its first message.
	res := s.run("sessions", "list", "--root", root, "--json")
	if res.code != 0 || !strings.Contains(res.stdout, `"name": "first line"`) {
		t.Fatalf("sessions list: %d %s %s", res.code, res.stdout, res.stderr)
	}

	// A host that goes away ends the UI with a message, and the terminal
	// is restored all the same.
	_ = exec.Command("tmux", "kill-session", "-t", m.name).Run()
	m.cmd("new-session", "-d", "-s", m.name, "-x", "120", "-y", "40", "--", "sh", "-c",
		fmt.Sprintf("%s --root %s --cwd %s; echo maka-exited=$?; sleep 600", makaBin, root, ws))
	m.waitFor("New session in")
	if r := s.run("host", "stop", "--root", root); r.code != 0 {
		t.Fatalf("host stop: %d %s", r.code, r.stderr)
	}
	m.waitFor("connection lost", "maka-exited=1")
	if alt, cur := m.paneFlags(); alt != "0" || cur != "1" {
		t.Fatalf("after the host went away: alternate screen %s, cursor shown %s", alt, cur)
	}
}
