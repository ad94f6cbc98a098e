package e2e_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/internal/prompt"
	"github.com/maka-agent/maka/protocol"
)

// systemOf returns the system message of a received request.
func systemOf(t *testing.T, r *modeltest.Request) string {
	t.Helper()
	if len(r.Messages) == 0 || r.Messages[0].Role != "system" {
		t.Fatalf("request without a system message: %+v", r.Messages)
	}
	return r.Messages[0].Text()
}

// inOrder fails unless each of want appears in s, in this order.
func inOrder(t *testing.T, s string, want ...string) {
	t.Helper()
	at := 0
	for _, w := range want {
		i := strings.Index(s[at:], w)
		if i < 0 {
			t.Fatalf("%q missing, or out of order, after byte %d of the system prompt:\n%s", w, at, s)
		}
		at += i + len(w)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSystemPromptCarriesInstructionsAndEnvironment runs turns over the
// socket in a workspace nested in a git repository and reads the system
// prompt the model received.
func TestSystemPromptCarriesInstructionsAndEnvironment(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(base, "config")
	t.Setenv("XDG_CONFIG_HOME", config)
	writeFile(t, filepath.Join(config, "maka", "AGENTS.md"), "USER-LEVEL: answer in English.")

	repo := filepath.Join(base, "repo")
	ws := filepath.Join(repo, "services", "api")
	writeFile(t, filepath.Join(repo, "AGENTS.md"), "REPO-ROOT: run go test before you finish.")
	writeFile(t, filepath.Join(repo, "services", "CLAUDE.md"), "NESTED-CLAUDE: services share one config.")
	writeFile(t, filepath.Join(ws, "AGENTS.md"), "WORKSPACE v1: the API is versioned.")
	writeFile(t, filepath.Join(base, "secret.md"), "OUTSIDE-SECRET")
	git := exec.Command("git", "-C", repo, "init", "-q", "-b", "e2e-branch")
	git.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	if out, err := git.CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	// A directory between the root and the workspace whose AGENTS.md
	// points out of the chain: skipped, its CLAUDE.md is not a fallback.
	writeFile(t, filepath.Join(ws, "v2", ".keep"), "")
	if err := os.Symlink(filepath.Join(base, "secret.md"), filepath.Join(ws, "v2", "AGENTS.md")); err != nil {
		t.Fatal(err)
	}
	nested := filepath.Join(ws, "v2")

	var mu sync.Mutex
	var systems []string
	h := newHost(t, func(r *modeltest.Request) modeltest.Reply {
		mu.Lock()
		systems = append(systems, systemOf(t, r))
		mu.Unlock()
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "ok"}}}
	})
	c := h.dial()
	res, err := c.Call(opCtx(t), protocol.OpSessionCreate, protocol.SessionCreateInput{
		SessionID: "prompt-1", Workspace: protocol.HostPathWorkspace(nested), PermissionMode: protocol.PermissionModeAsk,
	})
	if err != nil {
		t.Fatalf("session create: %v %#v", err, res)
	}
	before := time.Now()
	w := watch(t, c, "prompt-1")
	startTurn(t, c, "prompt-1", "t1", "hello")
	w.untilTerminal(t, "t1")
	after := time.Now()

	mu.Lock()
	first := systems[len(systems)-1]
	mu.Unlock()
	inOrder(t, first,
		"You are Maka", "- Read:", "- Bash:",
		filepath.Join(config, "maka", "AGENTS.md"), "USER-LEVEL",
		filepath.Join(repo, "AGENTS.md"), "REPO-ROOT",
		filepath.Join(repo, "services", "CLAUDE.md"), "NESTED-CLAUDE",
		filepath.Join(ws, "AGENTS.md"), "WORKSPACE v1",
		"# Environment", "Workspace: "+nested, "Git: a repository, branch e2e-branch",
		"Permission mode: ask")
	if !strings.Contains(first, "Today's date: "+before.Format("2006-01-02")) && !strings.Contains(first, "Today's date: "+after.Format("2006-01-02")) {
		t.Errorf("no date of today in:\n%s", first)
	}
	if strings.Contains(first, "OUTSIDE-SECRET") {
		t.Fatalf("a symlink out of the chain was followed:\n%s", first)
	}

	// A changed file is read again on the next turn; a file grown past
	// the bound is cut, and the prompt says where.
	writeFile(t, filepath.Join(ws, "AGENTS.md"), "WORKSPACE v2: the API has a second version.")
	startTurn(t, c, "prompt-1", "t2", "again")
	w.untilTerminal(t, "t2")
	mu.Lock()
	second := systems[len(systems)-1]
	mu.Unlock()
	if !strings.Contains(second, "WORKSPACE v2") || strings.Contains(second, "WORKSPACE v1") {
		t.Fatalf("the changed file was not read again:\n%s", second)
	}

	writeFile(t, filepath.Join(repo, "services", "CLAUDE.md"), "NESTED-CLAUDE\n"+strings.Repeat("a long rule of the services tree\n", 2000))
	startTurn(t, c, "prompt-1", "t3", "third")
	w.untilTerminal(t, "t3")
	mu.Lock()
	third := systems[len(systems)-1]
	mu.Unlock()
	inOrder(t, third, "USER-LEVEL", "REPO-ROOT", "NESTED-CLAUDE", "a long rule",
		"[Instructions cut here at the 32 KiB limit", filepath.Join(repo, "services", "CLAUDE.md"), "and 1 later files", "# Environment")
	if strings.Contains(third, "WORKSPACE v2") {
		t.Errorf("a file after the cut was sent")
	}
	start, end := strings.Index(third, "# Instructions"), strings.Index(third, "# Environment")
	if n := end - start; n > prompt.MaxInstructionBytes {
		t.Errorf("instructions are %d bytes, over the bound", n)
	}
}

// TestTrivialTurnRequestSize logs what a trivial turn (one user message,
// a workspace without instruction files) sends to the model: the bytes of
// the system prompt and of the tool schemas (docs/benchmarks.md).
func TestTrivialTurnRequestSize(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	var mu sync.Mutex
	var last *modeltest.Request
	h := newHost(t, func(r *modeltest.Request) modeltest.Reply {
		mu.Lock()
		last = r
		mu.Unlock()
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "ok"}}}
	})
	c := h.dial()
	createSession(t, c, "size-1", "ask")
	w := watch(t, c, "size-1")
	startTurn(t, c, "size-1", "t1", "hi")
	w.untilTerminal(t, "t1")
	mu.Lock()
	r := last
	mu.Unlock()
	var body struct {
		Tools json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatal(err)
	}
	system := systemOf(t, r)
	if len(system) < 1000 || len(body.Tools) < 1000 {
		t.Fatalf("system %d bytes, tools %d bytes", len(system), len(body.Tools))
	}
	t.Logf("trivial turn: system prompt %d bytes, tool schemas %d bytes (%d tools), whole request %d bytes",
		len(system), len(body.Tools), len(r.Tools), len(r.Body))
}
