package turns

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/sessions"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/internal/tasks"
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
			name: "reasoning without text keeps its signature on the step",
			events: func(t *testing.T) []recordEvent {
				return []recordEvent{
					userMsg(t, "go"),
					thinkingDone(t, "s1", "", "enc"),
					textDone(t, "s1", ""),
					callStarted(t, "s1", "a", "Read", `{"path":"a"}`),
					callFinished(t, "a", "Read", "A", false),
					thinkingDone(t, "s2", "", "enc-2"), // a step with nothing else is dropped
				}
			},
			want: []model.Message{
				user("go"),
				{Role: model.RoleAssistant, ThinkingSignature: "enc", ToolCalls: []model.ToolCall{toolCall("a", "Read", `{"path":"a"}`)}},
				toolMsg("a", "Read", "A", false),
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

// A history extended event by event gives, at every point, what a
// history built at once from the same events gives: a call left
// unanswered in one turn is dropped from that turn's replay, yet a later
// result still answers it, and messages handed out are never changed by
// later events or by their caller.
func TestHistoryExtendsLikeAFullBuild(t *testing.T) {
	events := []recordEvent{
		userMsg(t, "go"),
		thinkingDone(t, "s1", "plan", "sig"),
		textDone(t, "s1", "two calls"),
		callStarted(t, "s1", "a", "Read", `{"path":"a"}`),
		callStarted(t, "s1", "b", "Bash", `{"command":"make"}`),
		callFinished(t, "a", "Read", "A", false),
		rec(t, sessions.EventSteeringMessage, sessions.MessagePayload{TurnID: "t1", MessageID: "st", Text: "hurry"}),
		userMsg(t, "next"),
		callFinished(t, "b", "Bash", "late B", false),
		callFinished(t, "ghost", "Read", "orphan", false),
		callStarted(t, "s2", "a", "Read", `{"path":"again"}`),
		callFinished(t, "a", "Read", "A2", true),
		// A step whose calls settle one by one grows past its capacity.
		callStarted(t, "s3", "c1", "Read", `{}`),
		callStarted(t, "s3", "c2", "Read", `{}`),
		callFinished(t, "c1", "Read", "1", false),
		callFinished(t, "c2", "Read", "2", false),
		callStarted(t, "s3", "c3", "Read", `{}`),
		callFinished(t, "c3", "Read", "3", false),
		callStarted(t, "s3", "c4", "Read", `{}`),
		callFinished(t, "c4", "Read", "4", false),
		textDone(t, "s4", "done"),
	}
	h := newHistory()
	var handed [][]model.Message
	var wants [][]model.Message
	for i, ev := range events {
		if err := h.add(ev); err != nil {
			t.Fatal(err)
		}
		got := h.messages()
		want, err := buildHistory(events[:i+1])
		if err != nil {
			t.Fatal(err)
		}
		if !historyEqual(got, want) {
			t.Fatalf("after %d events:\n%s\nwant\n%s", i+1, dump(got), dump(want))
		}
		// The caller appends to what it was handed (the agent does).
		for j := range got {
			got[j].ToolCalls = append(got[j].ToolCalls, model.ToolCall{ID: "appended"})
		}
		handed = append(handed, got)
		again, _ := buildHistory(events[:i+1])
		wants = append(wants, again)
	}
	for i := range handed {
		for j := range handed[i] {
			calls := handed[i][j].ToolCalls
			if last := calls[len(calls)-1]; last.ID != "appended" {
				t.Fatalf("what the caller appended after %d events became %+v", i+1, last)
			}
			handed[i][j].ToolCalls = calls[:len(calls)-1]
		}
		if !historyEqual(handed[i], wants[i]) {
			t.Fatalf("messages handed out after %d events changed:\n%s\nwant\n%s", i+1, dump(handed[i]), dump(wants[i]))
		}
	}
	final := h.messages()
	if !historyEqual(final, wants[len(wants)-1]) {
		t.Fatalf("the history was changed by its callers:\n%s", dump(final))
	}
}

// replayStore opens a store holding a session of turns turns.
func replayStore(t *testing.T, turns int) (*store.Store, admission) {
	t.Helper()
	st, err := store.Open(testCtxInternal(t), filepath.Join(t.TempDir(), "maka.db"),
		store.Options{Migrations: []store.Migration{sessions.Migration, tasks.Migration, Migration,
			{Version: Migration.Version + 1, Up: CompactionMigration.Up}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	return st, longSession(t, st, turns)
}

func testCtxInternal(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// The kept history of a session is extended by the turns admitted since,
// and rebuilt when the record it came from is no longer the session's.
func TestReplayKeepsAndExtendsTheSessionHistory(t *testing.T) {
	st, _ := replayStore(t, 6)
	ctx := testCtxInternal(t)
	c := &Owner{opts: Options{Store: st}}
	c.histories.max = DefaultHistoryCacheBytes
	fresh := func(chainSeq int64) []model.Message {
		t.Helper()
		f := &Owner{opts: Options{Store: st}}
		f.histories.max = DefaultHistoryCacheBytes
		msgs, err := f.replay(ctx, admission{SessionID: "s", ChainSeq: chainSeq})
		if err != nil {
			t.Fatal(err)
		}
		return msgs
	}
	for _, seq := range []int64{3, 4, 7, 7, 2, 7} {
		got, err := c.replay(ctx, admission{SessionID: "s", ChainSeq: seq})
		if err != nil {
			t.Fatal(err)
		}
		if want := fresh(seq); !historyEqual(got, want) || len(got) != 4*int(seq-1) {
			t.Fatalf("replay before turn %d: %d messages, fresh build %d", seq, len(got), len(want))
		}
	}
	if h := c.histories.take("s"); h == nil || h.upto != 6 || h.uptoRun != "r5" {
		t.Fatalf("kept history %+v, want one up to turn 6", h)
	} else {
		c.histories.put("s", h)
	}

	// The session's record is replaced (the same chain, other runs): the
	// kept history is not the record's any more and is rebuilt.
	if err := st.Write(ctx, func(tx *store.Tx) error {
		for _, q := range []string{
			`UPDATE run_events SET run_id = 'x' || run_id, payload = replace(payload, 'please look', 'now read') WHERE session_id = 's'`,
			`UPDATE turn_admissions SET run_id = 'x' || run_id WHERE session_id = 's'`,
		} {
			if _, err := tx.Exec(q); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got, err := c.replay(ctx, admission{SessionID: "s", ChainSeq: 7})
	if err != nil {
		t.Fatal(err)
	}
	if want := fresh(7); !historyEqual(got, want) || !strings.HasPrefix(got[0].Text, "now read") {
		t.Fatalf("replay after the record changed: %q, fresh %q", got[0].Text, want[0].Text)
	}
}

// The kept histories are bounded in bytes, least recently used first out.
func TestHistoryCacheBound(t *testing.T) {
	c := historyCache{max: 100}
	h := func(size int) *history { x := newHistory(); x.size = size; return x }
	c.put("a", h(40))
	c.put("b", h(40))
	if c.take("a") == nil {
		t.Fatal("a was not kept")
	}
	c.put("a", h(40)) // a is now the most recent
	c.put("c", h(40)) // evicts b
	if c.take("b") != nil {
		t.Fatal("b, the least recently used, was kept beyond the bound")
	}
	if c.take("a") == nil || c.take("c") == nil || c.size != 0 {
		t.Fatalf("a and c should be kept (size %d)", c.size)
	}
	c.put("big", h(101))
	if c.take("big") != nil || c.size != 0 {
		t.Fatal("a history larger than the bound was kept")
	}
	c.put("d", h(10))
	c.put("d", h(20)) // replaces
	if c.size != 20 || c.order.Len() != 1 {
		t.Fatalf("replacing a history: size %d, %d entries", c.size, c.order.Len())
	}
}

// buildHistory turns record events, in order, into model messages.
func buildHistory(events []recordEvent) ([]model.Message, error) {
	h := newHistory()
	for _, ev := range events {
		if err := h.add(ev); err != nil {
			return nil, err
		}
	}
	return h.messages(), nil
}

// An archived session's kept history is dropped; its next replay (after
// an unarchive) rebuilds the same conversation from the record.
func TestForgetHistory(t *testing.T) {
	st, _ := replayStore(t, 3)
	ctx := testCtxInternal(t)
	c := &Owner{opts: Options{Store: st}}
	c.histories.max = DefaultHistoryCacheBytes
	before, err := c.replay(ctx, admission{SessionID: "s", ChainSeq: 4})
	if err != nil {
		t.Fatal(err)
	}
	c.ForgetHistory("s")
	if c.histories.size != 0 || c.histories.order.Len() != 0 {
		t.Fatalf("history still kept: %d bytes, %d entries", c.histories.size, c.histories.order.Len())
	}
	after, err := c.replay(ctx, admission{SessionID: "s", ChainSeq: 4})
	if err != nil {
		t.Fatal(err)
	}
	if !historyEqual(before, after) || len(after) != 12 {
		t.Fatalf("replay after forgetting: %d messages, before %d", len(after), len(before))
	}
}
