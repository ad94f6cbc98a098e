package turns

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/sessions"
)

// rec encodes one record event.
func rec(t *testing.T, typ string, payload any) recordEvent {
	t.Helper()
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	return recordEvent{typ: typ, payload: b}
}

func userMsg(t *testing.T, text string) recordEvent {
	return rec(t, sessions.EventUserMessage, sessions.MessagePayload{TurnID: "t1", MessageID: "u-" + text, Text: text})
}

func textDone(t *testing.T, step, text string) recordEvent {
	return rec(t, sessions.EventTextComplete, sessions.MessagePayload{TurnID: "t1", MessageID: step, Text: text})
}

func thinkingDone(t *testing.T, step, text, sig string) recordEvent {
	return rec(t, sessions.EventThinkingComplete, sessions.MessagePayload{TurnID: "t1", MessageID: step, Text: text, Signature: sig})
}

func callStarted(t *testing.T, step, id, name, args string) recordEvent {
	p := sessions.ToolCallStartedPayload{TurnID: "t1", ToolUseID: id, ToolName: name, StepID: step}
	if args != "" {
		p.Args = json.RawMessage(args)
	}
	return rec(t, sessions.EventToolCallStarted, p)
}

func callFinished(t *testing.T, id, name, output string, isError bool) recordEvent {
	d := int64(3)
	return rec(t, sessions.EventToolCallFinished, sessions.ToolCallFinishedPayload{
		TurnID: "t1", ToolUseID: id, ToolName: name, Output: output, IsError: isError, DurationMs: &d,
		Content: json.RawMessage(fmt.Sprintf(`{"kind":"text","text":%q}`, output)),
	})
}

func user(text string) model.Message { return model.Message{Role: model.RoleUser, Text: text} }

func assistant(text string, calls ...model.ToolCall) model.Message {
	return model.Message{Role: model.RoleAssistant, Text: text, ToolCalls: calls}
}

func toolCall(id, name, args string) model.ToolCall {
	return model.ToolCall{ID: id, Name: name, Input: json.RawMessage(args)}
}

func toolMsg(id, name, text string, isError bool) model.Message {
	return model.Message{Role: model.RoleTool, ToolCallID: id, ToolName: name, Text: text, IsError: isError}
}

func TestBuildHistory(t *testing.T) {
	withThinking := assistant("let me look", toolCall("a", "Read", `{"path":"x"}`), toolCall("b", "Grep", `{"pattern":"y"}`))
	withThinking.Thinking, withThinking.ThinkingSignature = "the user wants x", "sig-1"
	tests := []struct {
		name   string
		events func(t *testing.T) []recordEvent
		want   []model.Message
	}{
		{
			name: "text-only turns",
			events: func(t *testing.T) []recordEvent {
				return []recordEvent{userMsg(t, "hi"), textDone(t, "s1", "hello"), userMsg(t, "again"), textDone(t, "s2", "hello again")}
			},
			want: []model.Message{user("hi"), assistant("hello"), user("again"), assistant("hello again")},
		},
		{
			name: "a step's thinking, text and calls form one assistant message",
			events: func(t *testing.T) []recordEvent {
				return []recordEvent{
					userMsg(t, "find x"),
					thinkingDone(t, "s1", "the user wants x", "sig-1"),
					textDone(t, "s1", "let me look"),
					callStarted(t, "s1", "a", "Read", `{"path":"x"}`),
					callStarted(t, "s1", "b", "Grep", `{"pattern":"y"}`),
					callFinished(t, "b", "Grep", "no matches", true),
					callFinished(t, "a", "Read", "contents of x", false),
					textDone(t, "s2", "x says hello"),
				}
			},
			want: []model.Message{
				user("find x"),
				withThinking,
				toolMsg("b", "Grep", "no matches", true),
				toolMsg("a", "Read", "contents of x", false),
				assistant("x says hello"),
			},
		},
		{
			name: "interleaved settlement of concurrent calls",
			events: func(t *testing.T) []recordEvent {
				return []recordEvent{
					userMsg(t, "go"),
					textDone(t, "s1", "two calls"),
					callStarted(t, "s1", "a", "Read", `{"path":"a"}`),
					callFinished(t, "a", "Read", "A", false),
					callStarted(t, "s1", "b", "Read", `{"path":"b"}`),
					callFinished(t, "b", "Read", "B", false),
					textDone(t, "s2", "done"),
				}
			},
			want: []model.Message{
				user("go"),
				assistant("two calls", toolCall("a", "Read", `{"path":"a"}`), toolCall("b", "Read", `{"path":"b"}`)),
				toolMsg("a", "Read", "A", false),
				toolMsg("b", "Read", "B", false),
				assistant("done"),
			},
		},
		{
			name: "a step with calls only",
			events: func(t *testing.T) []recordEvent {
				return []recordEvent{
					userMsg(t, "go"),
					callStarted(t, "s1", "a", "Bash", `{"command":"ls"}`),
					callFinished(t, "a", "Bash", "file", false),
				}
			},
			want: []model.Message{user("go"), assistant("", toolCall("a", "Bash", `{"command":"ls"}`)), toolMsg("a", "Bash", "file", false)},
		},
		{
			name: "absent arguments replay as an empty object and a missing result name comes from the call",
			events: func(t *testing.T) []recordEvent {
				return []recordEvent{userMsg(t, "go"), callStarted(t, "s1", "a", "Probe", ""), callFinished(t, "a", "", "ok", false)}
			},
			want: []model.Message{user("go"), assistant("", toolCall("a", "Probe", `{}`)), toolMsg("a", "Probe", "ok", false)},
		},
		{
			name: "a call without a result is dropped",
			events: func(t *testing.T) []recordEvent {
				return []recordEvent{
					userMsg(t, "go"),
					textDone(t, "s1", "two calls"),
					callStarted(t, "s1", "a", "Read", `{"path":"a"}`),
					callStarted(t, "s1", "b", "Bash", `{"command":"sleep 100"}`),
					callFinished(t, "a", "Read", "A", false),
				}
			},
			want: []model.Message{user("go"), assistant("two calls", toolCall("a", "Read", `{"path":"a"}`)), toolMsg("a", "Read", "A", false)},
		},
		{
			name: "an assistant message left empty is dropped",
			events: func(t *testing.T) []recordEvent {
				return []recordEvent{
					userMsg(t, "go"),
					callStarted(t, "s1", "a", "Bash", `{"command":"sleep 100"}`),
					userMsg(t, "next"),
					textDone(t, "s2", "ok"),
				}
			},
			want: []model.Message{user("go"), user("next"), assistant("ok")},
		},
		{
			name: "an orphan or repeated result is dropped",
			events: func(t *testing.T) []recordEvent {
				return []recordEvent{
					userMsg(t, "go"),
					callFinished(t, "ghost", "Read", "boo", false),
					callStarted(t, "s1", "a", "Read", `{}`),
					callFinished(t, "a", "Read", "A", false),
					callFinished(t, "a", "Read", "A again", false),
				}
			},
			want: []model.Message{user("go"), assistant("", toolCall("a", "Read", `{}`)), toolMsg("a", "Read", "A", false)},
		},
		{
			name: "other events are ignored",
			events: func(t *testing.T) []recordEvent {
				return []recordEvent{
					userMsg(t, "go"),
					rec(t, sessions.EventTextDelta, sessions.MessagePayload{TurnID: "t1", MessageID: "s1", Text: "partial"}),
					rec(t, EventPermissionDecision, map[string]string{"toolUseId": "a", "decision": "allow"}),
					textDone(t, "s1", "done"),
					rec(t, EventTokenUsage, model.Usage{InputTokens: 1}),
					rec(t, EventTurnTerminal, map[string]string{"status": "completed"}),
					{typ: "something_new", payload: []byte(`not even json`)},
				}
			},
			want: []model.Message{user("go"), assistant("done")},
		},
		{
			name:   "no events",
			events: func(t *testing.T) []recordEvent { return nil },
			want:   []model.Message{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := buildHistory(tc.events(t))
			if err != nil {
				t.Fatal(err)
			}
			if !historyEqual(got, tc.want) {
				t.Errorf("history =\n%s\nwant\n%s", dump(got), dump(tc.want))
			}
		})
	}
}

// TestBuildHistoryReusedToolUseIDs replays two steps whose calls reuse the
// same tool use id (providers that number calls per response do): each
// call keeps its own result.
func TestBuildHistoryReusedToolUseIDs(t *testing.T) {
	events := []recordEvent{
		userMsg(t, "go"),
		callStarted(t, "s1", "call_0", "Read", `{"path":"a"}`),
		callFinished(t, "call_0", "Read", "A", false),
		callStarted(t, "s2", "call_0", "Read", `{"path":"b"}`),
		callFinished(t, "call_0", "Read", "B", false),
		textDone(t, "s3", "done"),
	}
	got, err := buildHistory(events)
	if err != nil {
		t.Fatal(err)
	}
	want := []model.Message{
		user("go"),
		assistant("", toolCall("call_0", "Read", `{"path":"a"}`)),
		toolMsg("call_0", "Read", "A", false),
		assistant("", toolCall("call_0", "Read", `{"path":"b"}`)),
		toolMsg("call_0", "Read", "B", false),
		assistant("done"),
	}
	if !historyEqual(got, want) {
		t.Errorf("history =\n%s\nwant\n%s", dump(got), dump(want))
	}
}

func TestBuildHistoryRejectsMalformedPayloads(t *testing.T) {
	for _, typ := range []string{
		sessions.EventUserMessage, sessions.EventTextComplete, sessions.EventThinkingComplete,
		sessions.EventToolCallStarted, sessions.EventToolCallFinished,
	} {
		for _, payload := range []string{`{"text":`, `["a"]`, `{"turnId": 5}`} {
			t.Run(typ+" "+payload, func(t *testing.T) {
				events := []recordEvent{userMsg(t, "fine"), {typ: typ, payload: []byte(payload)}}
				if got, err := buildHistory(events); err == nil {
					t.Fatalf("no error for %s payload %s; history %s", typ, payload, dump(got))
				}
			})
		}
	}
}

func historyEqual(a, b []model.Message) bool {
	return slices.EqualFunc(a, b, func(x, y model.Message) bool {
		return x.Role == y.Role && x.Text == y.Text && x.Thinking == y.Thinking &&
			x.ThinkingSignature == y.ThinkingSignature && x.ToolCallID == y.ToolCallID &&
			x.ToolName == y.ToolName && x.IsError == y.IsError &&
			slices.EqualFunc(x.ToolCalls, y.ToolCalls, func(c, d model.ToolCall) bool {
				return c.ID == d.ID && c.Name == d.Name && string(c.Input) == string(d.Input)
			})
	})
}

func dump(msgs []model.Message) string {
	b, err := json.MarshalIndent(msgs, "", "  ")
	if err != nil {
		return err.Error()
	}
	return string(b)
}
