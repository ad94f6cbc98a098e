package main

import (
	"encoding/json"
	"testing"

	"github.com/maka-agent/maka/internal/modeltest"
)

func tool(name, schema string) modeltest.RequestTool {
	var t modeltest.RequestTool
	t.Function.Name, t.Function.Parameters = name, json.RawMessage(schema)
	return t
}

// The fake model asks each client for its own shell tool, with arguments
// in that tool's shape.
func TestShellCallFollowsTheOfferedTool(t *testing.T) {
	for _, c := range []struct {
		name  string
		tools []modeltest.RequestTool
		want  string
	}{
		{"codex exec_command", []modeltest.RequestTool{tool("apply_patch", `{}`), tool("exec_command", `{"properties":{"cmd":{"type":"string"}},"required":["cmd"]}`)},
			`{"cmd":"echo bench-shell-ok"}`},
		{"codex shell", []modeltest.RequestTool{tool("shell", `{"properties":{"command":{"type":"array"}}}`)},
			`{"command":["bash","-lc","echo bench-shell-ok"]}`},
		{"claude Bash", []modeltest.RequestTool{tool("Read", `{}`), tool("Bash", `{"properties":{"command":{"type":"string"},"description":{"type":"string"}},"required":["command"]}`)},
			`{"command":"echo bench-shell-ok"}`},
		{"opencode bash", []modeltest.RequestTool{tool("bash", `{"properties":{"command":{"type":"string"},"description":{"type":"string"}},"required":["command","description"]}`)},
			`{"command":"echo bench-shell-ok","description":"Print a marker"}`},
	} {
		_, args, ok := shellCall(c.tools)
		if !ok || args != c.want {
			t.Errorf("%s: %s %v, want %s", c.name, args, ok, c.want)
		}
	}
	if name, _, ok := shellCall([]modeltest.RequestTool{tool("Read", `{}`)}); ok {
		t.Errorf("no shell tool offered, yet %s was picked", name)
	}
}

// The shell scenario is one call, then text once a result carrying the
// command's output comes back; other prompts get the short answer.
func TestFakeAnswers(t *testing.T) {
	var c cleanups
	defer c.run()
	f := newFake(&c, "")
	user := modeltest.Message{Role: "user", Content: shellPrompt}
	bash := tool("Bash", `{"properties":{"command":{"type":"string"}}}`)
	rep := f.answer(&modeltest.Request{Messages: []modeltest.Message{user}, Tools: []modeltest.RequestTool{bash}})
	if len(rep.Chunks) != 1 || rep.Chunks[0].Call == nil || rep.Chunks[0].Call.Name != "Bash" {
		t.Fatalf("first answer %+v", rep)
	}
	result := modeltest.Message{Role: "tool", Content: []any{map[string]any{"type": "text", "text": "bench-shell-ok\n"}}, ToolCallID: "call_bench_1"}
	rep = f.answer(&modeltest.Request{Messages: []modeltest.Message{user, {Role: "assistant"}, result}, Tools: []modeltest.RequestTool{bash}})
	if len(rep.Chunks) != 1 || rep.Chunks[0].Text == "" {
		t.Fatalf("answer after the result %+v", rep)
	}
	if calls, ran := f.shellStats(); calls["Bash"] != 1 || ran != 1 {
		t.Fatalf("calls %v, ran %d", calls, ran)
	}
	rep = f.answer(&modeltest.Request{Messages: []modeltest.Message{{Role: "user", Content: trivialPrompt}}, Tools: []modeltest.RequestTool{bash}})
	if len(rep.Chunks) != 1 || rep.Chunks[0].Text != "ok" {
		t.Fatalf("trivial answer %+v", rep)
	}
}
