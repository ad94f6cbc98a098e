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
