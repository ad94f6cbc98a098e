package cli_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/maka-agent/maka/internal/modeltest"
)

// TestTUIOffersALocalServerInTmux: with no connection, the real terminal
// UI finds the llama.cpp server answering on 127.0.0.1:8080, offers it,
// adds it on y, and the next message is answered by it. Skipped when that
// port is taken or another local server answers first.
func TestTUIOffersALocalServerInTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:8080")
	if err != nil {
		t.Skipf("127.0.0.1:8080 is taken: %v", err)
	}
	srv := modeltest.New(t, func(req *modeltest.Request) modeltest.Reply {
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "local says: " + req.LastUser()}}}
	})
	srv.SetModels("qwen3", "llama3")
	target, _ := url.Parse(srv.URL)
	proxy := &http.Server{Handler: httputil.NewSingleHostReverseProxy(target)}
	go func() { _ = proxy.Serve(ln) }()
	t.Cleanup(func() { _ = proxy.Close() })

	root, _ := newRoot(t)
	ws := t.TempDir()
	s := newSandbox(t)
	m := &tmux{t: t, name: fmt.Sprintf("maka-offer-%d", os.Getpid()), env: append(s.env, "TERM=xterm-256color")}
	t.Cleanup(func() {
		_ = exec.Command("tmux", "kill-session", "-t", m.name).Run()
		s.run("host", "stop", "--root", root)
	})
	m.cmd("new-session", "-d", "-s", m.name, "-x", "120", "-y", "40", "--", makaBin, "--root", root, "--cwd", ws,
		"--host-arg=--idle-grace=0")
	pane := m.waitFor("[y/N]")
	if !strings.Contains(pane, "Found a llama.cpp server at http://127.0.0.1:8080/v1 with models qwen3, llama3") {
		t.Skipf("another local model server answered first:\n%s", pane)
	}
	m.waitFor("Add it as connection local with model qwen3? [y/N]", "2. llama3")
	m.cmd("send-keys", "-t", m.name, "2")
	m.waitFor("added connection local (a llama.cpp server at http://127.0.0.1:8080/v1), default model llama3")
	m.cmd("send-keys", "-t", m.name, "-l", "hello there")
	m.cmd("send-keys", "-t", m.name, "Enter")
	m.waitFor("local says: hello there")
	m.cmd("send-keys", "-t", m.name, "C-d")
	waitTmuxExit(m)

	r := s.run("connection", "list", "--root", root)
	if r.code != 0 || !strings.Contains(r.stdout, "local") || !strings.Contains(r.stdout, "llama3") {
		t.Fatalf("connection list = %d:\n%s", r.code, r.stdout)
	}
	if got := srv.Seen(); len(got) == 0 || got[len(got)-1].Model != "llama3" {
		t.Fatalf("the turn did not reach the chosen model: %d requests", len(got))
	}
}
