package e2e_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/protocol"
)

// args encodes tool call arguments.
func args(t *testing.T, v map[string]any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestToolTurnIsStreamedAndRecorded runs a turn in a bypass session in
// which the model writes a file, reads it back, runs a command over it and
// answers: a subscriber opened before the start sees every step in order,
// the model receives each tool's real result, the file is on disk, and the
// transcript holds the whole turn. The model speaks Chat Completions, then
// the Responses API.
func TestToolTurnIsStreamedAndRecorded(t *testing.T) {
	for _, api := range []struct{ name, providerType string }{
		{"chat", "openai-compatible"},
		{"responses", "openai-responses-compatible"},
	} {
		t.Run(api.name, func(t *testing.T) { toolTurnIsStreamedAndRecorded(t, api.providerType, api.name) })
	}
}

func toolTurnIsStreamedAndRecorded(t *testing.T, providerType, api string) {
	const (
		file    = "notes/hello.txt"
		content = "hello from the model\n"
		prompt  = "Write a note, read it and cat it."
	)
	steps := []struct {
		text string
		call modeltest.Call
	}{
		{"Writing the note. ", modeltest.Call{ID: "call_write", Name: "Write", Arguments: args(t, map[string]any{"path": file, "content": content})}},
		{"Reading it back. ", modeltest.Call{ID: "call_read", Name: "Read", Arguments: args(t, map[string]any{"path": file})}},
		{"Running a command. ", modeltest.Call{ID: "call_bash", Name: "Bash", Arguments: args(t, map[string]any{"command": "echo hi && cat " + file})}},
	}
	final := []string{"All ", "done: ", "the note says hello."}
	h := newHostSpeaking(t, providerType, func(req *modeltest.Request) modeltest.Reply {
		n := len(req.ToolResultsSinceUser())
		if n < len(steps) {
			call := steps[n].call
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: steps[n].text}, {Call: &call}}}
		}
		var chunks []modeltest.Chunk
		for _, s := range final {
			chunks = append(chunks, modeltest.Chunk{Text: s})
		}
		return modeltest.Reply{Chunks: chunks}
	})
	c := h.conn
	ws := createSession(t, c, "tools", protocol.PermissionModeBypass)
	w := watch(t, c, "tools")
	started := startTurn(t, c, "tools", "turn-1", prompt)
	w.untilTerminal(t, "turn-1")

	frames := w.barrier(t, c)

	// A turn admitted and started in one write goes straight to running.
	want := []string{
		"projection:running",
		"text", "tool_start:Write", "tool_result:Write",
		"text", "tool_start:Read", "tool_result:Read",
		"text", "tool_start:Bash", "tool_output_delta:Bash", "tool_result:Bash",
		"text", "projection:completed",
	}
	got := outline(frames)
	if len(got) > 0 && got[0] == "projection:admitted" {
		got = got[1:]
	}
	if !slices.Equal(got, want) {
		t.Fatalf("frames:\n got %v\nwant %v", got, want)
	}
	if n := len(terminals(frames, "turn-1")); n != 1 {
		t.Fatalf("%d terminal projections, want 1", n)
	}
	wantText := steps[0].text + steps[1].text + steps[2].text + strings.Join(final, "")
	if got := deltaText(frames, "turn-1"); got != wantText {
		t.Fatalf("streamed text %q, want %q", got, wantText)
	}
	var bashOut strings.Builder
	for _, f := range frames {
		switch f := f.(type) {
		case protocol.DeltaFrame:
			if f.SessionID != "tools" || f.Delta.RunID != started.RunID {
				t.Fatalf("delta of another run: %+v", f)
			}
		case protocol.EventFrame:
			if f.RunID != started.RunID || f.Event.TurnID != "turn-1" {
				t.Fatalf("event of another run: %+v", f)
			}
			switch f.Event.Type {
			case "tool_output_delta":
				if f.Event.Stream == "stdout" {
					bashOut.WriteString(f.Event.Chunk)
				}
			case "tool_result":
				if f.Event.Status != "completed" {
					t.Fatalf("tool result %s: status %q", f.Event.ToolUseID, f.Event.Status)
				}
			}
		}
	}
	if got := bashOut.String(); got != "hi\n"+content {
		t.Fatalf("live Bash output %q", got)
	}
	if got := queryTurn(t, c, "tools", "turn-1"); got.Status != protocol.TurnCompleted || got.RunID != started.RunID {
		t.Fatalf("turn.query: %+v", got)
	}

	// The model received what the tools really did.
	seen := h.model.Seen()
	if len(seen) != 4 {
		t.Fatalf("the model got %d requests, want 4", len(seen))
	}
	for i, r := range seen {
		if r.API != api {
			t.Fatalf("request %d went to the %s endpoint, want %s", i, r.API, api)
		}
	}
	first := seen[0]
	if first.Authorization != "Bearer "+apiKey || first.Model != "m1" || !first.Stream || first.LastUser() != prompt {
		t.Fatalf("first request: auth %q model %q stream %v user %q", first.Authorization, first.Model, first.Stream, first.LastUser())
	}
	var offered []string
	for _, tool := range first.Tools {
		offered = append(offered, tool.Function.Name)
	}
	for _, name := range []string{"Write", "Read", "Bash"} {
		if !slices.Contains(offered, name) {
			t.Fatalf("tool %s not offered: %v", name, offered)
		}
	}
	results := seen[3].ToolResultsSinceUser()
	if len(results) != 3 {
		t.Fatalf("last request carries %d tool results, want 3", len(results))
	}
	for i, want := range []struct{ id, contains string }{
		{"call_write", "Wrote"},
		{"call_read", strings.TrimSpace(content)},
		{"call_bash", "hi"},
	} {
		if results[i].ToolCallID != want.id || !strings.Contains(results[i].Text(), want.contains) {
			t.Fatalf("tool result %d: id %q text %q, want id %q containing %q", i, results[i].ToolCallID, results[i].Text(), want.id, want.contains)
		}
	}
	if !strings.Contains(results[2].Text(), strings.TrimSpace(content)) {
		t.Fatalf("Bash result %q lacks the file content", results[2].Text())
	}
	if got := seen[2].ToolResultsSinceUser(); len(got) != 2 || !strings.Contains(got[1].Text(), strings.TrimSpace(content)) {
		t.Fatalf("the request after Read does not carry the file content: %+v", got)
	}

	b, err := os.ReadFile(filepath.Join(ws, file))
	if err != nil || string(b) != content {
		t.Fatalf("written file: %q %v", b, err)
	}

	msgs := transcript(t, c, "tools")
	var roles []string
	for _, m := range msgs {
		if m.TurnID != "turn-1" {
			t.Fatalf("transcript message of another turn: %+v", m)
		}
		role := string(m.Role)
		if m.Role == protocol.TranscriptRoleTool {
			role += ":" + m.ToolName + ":" + m.Status
		}
		roles = append(roles, role)
	}
	wantRoles := []string{"user", "assistant", "tool:Write:completed", "assistant", "tool:Read:completed",
		"assistant", "tool:Bash:completed", "assistant"}
	if !slices.Equal(roles, wantRoles) {
		t.Fatalf("transcript roles:\n got %v\nwant %v", roles, wantRoles)
	}
	if got := textsOf(msgs, protocol.TranscriptRoleUser); got[0] != prompt {
		t.Fatalf("user message %q", got[0])
	}
	wantAssistant := []string{steps[0].text, steps[1].text, steps[2].text, strings.Join(final, "")}
	if got := textsOf(msgs, protocol.TranscriptRoleAssistant); !slices.Equal(got, wantAssistant) {
		t.Fatalf("assistant messages %q, want %q", got, wantAssistant)
	}
}
