package tools

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newEnv returns an Env whose workspace is a fresh temporary directory
// (its real path).
func newEnv(t testing.TB) Env {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	return Env{SessionID: "s", RunID: "r", TurnID: "t", ToolUseID: "u", Workspace: ws}
}

// outside returns a directory next to the workspace, outside of it.
func outside(t *testing.T, env Env) string {
	t.Helper()
	dir := filepath.Join(filepath.Dir(env.Workspace), "outside")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// writeFile creates a file under the workspace.
func writeFile(t *testing.T, env Env, rel, content string) string {
	t.Helper()
	p := filepath.Join(env.Workspace, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// run calls tool with args (marshalled unless already raw JSON).
func run(t *testing.T, tool Tool, env Env, args any) Result {
	t.Helper()
	return runCtx(t, context.Background(), tool, env, args)
}

func runCtx(t *testing.T, ctx context.Context, tool Tool, env Env, args any) Result {
	t.Helper()
	var raw json.RawMessage
	switch a := args.(type) {
	case string:
		raw = json.RawMessage(a)
	default:
		b, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		raw = b
	}
	res, err := tool.Run(ctx, env, raw)
	if err != nil {
		t.Fatalf("%s.Run: unexpected Go error %v", tool.Name(), err)
	}
	if !json.Valid(res.Content) {
		t.Fatalf("%s.Run: content is not JSON: %s", tool.Name(), res.Content)
	}
	return res
}

// content decodes a result's content.
func content(t *testing.T, r Result) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Content, &m); err != nil {
		t.Fatalf("content %s: %v", r.Content, err)
	}
	return m
}

// text is the text of a "text" result.
func text(t *testing.T, r Result) string {
	t.Helper()
	m := content(t, r)
	if m["kind"] != "text" {
		t.Fatalf("kind = %v, want text (%s)", m["kind"], r.Content)
	}
	s, _ := m["text"].(string)
	return s
}

func mustError(t *testing.T, r Result, substr string) {
	t.Helper()
	if !r.IsError {
		t.Fatalf("want an error result containing %q, got success: %s", substr, r.Content)
	}
	if got := text(t, r); !containsFold(got, substr) {
		t.Fatalf("error %q does not mention %q", got, substr)
	}
}

func mustOK(t *testing.T, r Result) {
	t.Helper()
	if r.IsError {
		t.Fatalf("unexpected error result: %s", r.Content)
	}
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

func byName(t *testing.T, name string) Tool {
	t.Helper()
	tool, ok := NewRegistry(Builtins()...).Lookup(name)
	if !ok {
		t.Fatalf("no builtin %s", name)
	}
	return tool
}
