package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/maka-agent/maka/internal/modeltest"
)

type connectionListJSON struct {
	Default *struct {
		ConnectionID string `json:"connectionId"`
		ModelID      string `json:"modelId"`
	} `json:"defaultTarget"`
	Connections []struct {
		ConnectionID  string   `json:"connectionId"`
		Slug          string   `json:"slug"`
		ProviderType  string   `json:"providerType"`
		Models        []string `json:"enabledModelIds"`
		KeyConfigured bool     `json:"keyConfigured"`
		DefaultModel  string   `json:"defaultModel"`
	} `json:"connections"`
}

func (s *sandbox) connections(root string) connectionListJSON {
	s.t.Helper()
	r := s.run("connection", "list", "--root", root, "--json")
	var out connectionListJSON
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 0 {
		s.t.Fatalf("connection list = %d %q: %v", r.code, r.stdout, err)
	}
	return out
}

func TestConnectionCommands(t *testing.T) {
	srv := modeltest.New(t, func(req *modeltest.Request) modeltest.Reply {
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "model " + req.Model}}}
	})
	s := newSandbox(t, "MAKA_TEST_KEY=sk-from-env")
	root := spawnedRoot(t)
	r := s.run("connection", "add", "one", "--root", root, "--provider", "openai-compatible", "--base-url", srv.BaseURL(),
		"--model", "a", "--model", "b", "--key-env", "MAKA_TEST_KEY")
	if r.code != 0 || !strings.Contains(r.stdout, "default model: one a") {
		t.Fatalf("add one = %d %q %q", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout+r.stderr, "sk-from-env") {
		t.Fatal("the key was printed")
	}
	r = s.run("connection", "add", "two", "--root", root, "--provider", "ollama", "--model", "llama")
	if r.code != 0 || strings.Contains(r.stdout, "default model") || strings.Contains(r.stdout, "set-key") {
		t.Fatalf("add two = %d %q %q", r.code, r.stdout, r.stderr)
	}
	list := s.connections(root)
	if len(list.Connections) != 2 || list.Default == nil || list.Default.ModelID != "a" ||
		list.Connections[0].Slug != "one" || !list.Connections[0].KeyConfigured || list.Connections[0].DefaultModel != "a" ||
		strings.Join(list.Connections[0].Models, ",") != "a,b" || list.Connections[1].KeyConfigured {
		t.Fatalf("list %+v", list)
	}
	text := s.run("connection", "list", "--root", root)
	if text.code != 0 || !strings.Contains(text.stdout, "stored") || !strings.Contains(text.stdout, "not needed") || !strings.Contains(text.stdout, "* a") {
		t.Fatalf("list (text) %q", text.stdout)
	}

	// Explicit targets of a new session, and the default one.
	if r := s.run("run", "--root", root, "--connection", "one", "--model", "b", "hi"); r.code != 0 || r.stdout != "model b\n" {
		t.Fatalf("run --model b = %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := s.run("run", "--root", root, "--model", "b", "hi"); r.code != 0 || r.stdout != "model b\n" {
		t.Fatalf("run --model b on the default connection = %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := s.run("run", "--root", root, "--connection", "three", "hi"); r.code != 2 || !strings.Contains(r.stderr, "one, two") {
		t.Fatalf("run --connection three = %d %q", r.code, r.stderr)
	}

	if r := s.run("connection", "default", "one", "b", "--root", root); r.code != 0 || r.stdout != "default model: one b\n" {
		t.Fatalf("default one b = %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := s.run("connection", "default", "one", "zz", "--root", root); r.code != 1 || !strings.Contains(r.stderr, "not enabled") {
		t.Fatalf("default one zz = %d %q", r.code, r.stderr)
	}
	if r := s.run("run", "--root", root, "hi"); r.code != 0 || r.stdout != "model b\n" {
		t.Fatalf("run on the new default = %d %q %q", r.code, r.stdout, r.stderr)
	}

	if r := s.runWith("sk-replaced\n", "connection", "set-key", "one", "--root", root); r.code != 0 {
		t.Fatalf("set-key = %d %q", r.code, r.stderr)
	}
	if r := s.run("run", "--root", root, "hi"); r.code != 0 {
		t.Fatalf("run after set-key = %d %q", r.code, r.stderr)
	}
	seen := srv.Seen()
	if got := seen[len(seen)-1].Authorization; got != "Bearer sk-replaced" {
		t.Fatalf("authorization after set-key %q", got)
	}
	if seen[0].Authorization != "Bearer sk-from-env" {
		t.Fatalf("authorization from --key-env %q", seen[0].Authorization)
	}
	if r := s.runWith("k\n", "connection", "set-key", "two", "--root", root); r.code != 1 || !strings.Contains(r.stderr, "uses no API key") {
		t.Fatalf("set-key two = %d %q", r.code, r.stderr)
	}
	if r := s.runWith("k\n", "connection", "set-key", "nine", "--root", root); r.code != 1 || !strings.Contains(r.stderr, "one, two") {
		t.Fatalf("set-key nine = %d %q", r.code, r.stderr)
	}

	if r := s.run("connection", "remove", "one", "--root", root); r.code != 0 || !strings.Contains(r.stdout, "no default model now") {
		t.Fatalf("remove one = %d %q %q", r.code, r.stdout, r.stderr)
	}
	list = s.connections(root)
	if len(list.Connections) != 1 || list.Connections[0].Slug != "two" || list.Default != nil {
		t.Fatalf("list after remove %+v", list)
	}
	if r := s.run("connection", "remove", "one", "--root", root); r.code != 1 {
		t.Fatalf("removing twice = %d %q", r.code, r.stderr)
	}
	if r := s.run("run", "--root", root, "hi"); r.code != 1 || !strings.Contains(r.stderr, "maka connection default") {
		t.Fatalf("run without a default = %d %q", r.code, r.stderr)
	}
}

// A keyless local server works behind openai-compatible with --no-key:
// nothing asks for a key, no credential is sent, and the list says none.
func TestKeylessCompatibleConnection(t *testing.T) {
	srv := modeltest.New(t, func(req *modeltest.Request) modeltest.Reply {
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "keyless " + req.LastUser()}}}
	})
	srv.SetModels("m1", "m2")
	s := newSandbox(t)
	root := spawnedRoot(t)
	add := s.run("connection", "add", "local", "--root", root, "--provider", "openai-compatible", "--base-url", srv.BaseURL(), "--model", "m1", "--no-key")
	if add.code != 0 || !strings.Contains(add.stdout, "requests are sent without one") || add.stderr != "" {
		t.Fatalf("add --no-key = %d %q %q", add.code, add.stdout, add.stderr)
	}
	if r := s.run("connection", "list", "--root", root); !strings.Contains(r.stdout, "none") || strings.Contains(r.stdout, "missing") {
		t.Fatalf("list shows the keyless connection as %q", r.stdout)
	}
	r := s.run("run", "--root", root, "hello")
	if r.code != 0 || r.stdout != "keyless hello\n" {
		t.Fatalf("keyless run = %d %q %q", r.code, r.stdout, r.stderr)
	}
	for _, req := range srv.Seen() {
		if req.Authorization != "" {
			t.Fatalf("a keyless connection sent %q", req.Authorization)
		}
	}
	// An id the server does not list is warned about, with what it lists.
	w := s.run("connection", "add", "other", "--root", root, "--provider", "openai-compatible", "--base-url", srv.BaseURL(), "--model", "m3", "--no-key")
	if w.code != 0 || !strings.Contains(w.stderr, "model m3 is not among the models the server lists: m1, m2") {
		t.Fatalf("add of an unlisted model = %d %q", w.code, w.stderr)
	}
}

// Providers this host cannot run are refused when they are added.
func TestUnsupportedProvidersAreRefusedAtAdd(t *testing.T) {
	s := newSandbox(t)
	root := spawnedRoot(t)
	for _, p := range []string{"github-copilot", "claude-subscription", "google"} {
		r := s.run("connection", "add", "--root", root, "--provider", p, "--model", "x", "--no-key")
		if r.code != 2 || !strings.Contains(r.stderr, "not supported yet") {
			t.Errorf("add --provider %s = %d %q, want exit 2 'not supported yet'", p, r.code, r.stderr)
		}
	}
}

// A turn that cannot use its model is explained from the session's own
// connection, not the default target's.
func TestModelUnavailableNamesTheSessionsConnection(t *testing.T) {
	srv := modeltest.New(t, func(req *modeltest.Request) modeltest.Reply {
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "ok"}}}
	})
	s := newSandbox(t)
	root := spawnedRoot(t)
	addFakeConnection(t, s, root, srv.BaseURL(), "sk-good")
	if r := s.run("connection", "add", "paid", "--root", root, "--provider", "openai", "--model", "gpt-4o", "--no-key"); r.code != 0 {
		t.Fatalf("add = %d %q", r.code, r.stderr)
	}
	r := s.run("run", "--root", root, "--connection", "paid", "hello")
	if r.code != 1 || !strings.Contains(r.stderr, "no API key is stored for connection paid") ||
		!strings.Contains(r.stderr, "maka connection set-key paid") {
		t.Fatalf("run on a keyless openai connection = %d %q", r.code, r.stderr)
	}
}
