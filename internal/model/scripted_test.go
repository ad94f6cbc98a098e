package model

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func mustScript(t *testing.T, src string) *Script {
	t.Helper()
	s, err := ParseScript([]byte(src))
	if err != nil {
		t.Fatalf("ParseScript: %v", err)
	}
	return s
}

func TestParseScriptErrors(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"empty", ``, "empty document"},
		{"syntax", "{\"steps\": [\n  {\"events\": [}]}", "line 2"},
		{"not an object", `[1]`, "cannot unmarshal"},
		{"unknown top field", `{"steps":[{"events":[]}],"extra":1}`, `unknown field "extra"`},
		{"unknown event field", `{"steps":[{"events":[{"txt":"x"}]}]}`, `unknown field "txt"`},
		{"unknown error field", `{"steps":[{"events":[{"error":{"stat":1}}]}]}`, `unknown field "stat"`},
		{"trailing data", `{"steps":[{"events":[]}]} {}`, "unexpected data after"},
		{"no steps", `{}`, `"steps" is missing or empty`},
		{"empty steps", `{"steps":[]}`, `"steps" is missing or empty`},
		{"event without kind", `{"steps":[{"events":[{}]}]}`, "steps[0].events[0]: an event needs one of"},
		{"two kinds", `{"steps":[{"events":[{"text":"a","thinking":"b"}]}]}`, "got text, thinking"},
		{"repeat on tool call", `{"steps":[{"events":[{"toolCall":{"name":"X"},"repeat":2}]}]}`, `"repeat" applies only`},
		{"negative repeat", `{"steps":[{"events":[{"text":"a","repeat":-1}]}]}`, `"repeat" must be between`},
		{"huge repeat", `{"steps":[{"events":[{"text":"a","repeat":1000001}]}]}`, `"repeat" must be between`},
		{"times on text", `{"steps":[{"events":[{"text":"a","times":2}]}]}`, `"times" applies only to error`},
		{"times twice", `{"steps":[{"events":[{"error":{"times":1},"times":2}]}]}`, `"times" is given twice`},
		{"negative times", `{"steps":[{"events":[{"error":{"times":-1}}]}]}`, `"times" must be between`},
		{"bad finish", `{"steps":[{"events":[],"finish":"done"}]}`, `steps[0].finish: "done" is not one of`},
		{"negative usage", `{"steps":[{"events":[],"usage":{"input":-1,"output":0}}]}`, "steps[0].usage"},
		{"tool call without name", `{"steps":[{"events":[]},{"events":[{"toolCall":{"input":{}}}]}]}`, "steps[1].events[0]: toolCall: name is required"},
		{"tool input not object", `{"steps":[{"events":[{"toolCall":{"name":"X","input":[1]}}]}]}`, "input must be a JSON object"},
		{"negative delay", `{"steps":[{"events":[{"delayMs":-5}]}]}`, "delayMs must be between"},
		{"echo false", `{"steps":[{"events":[{"echo":false}]}]}`, `"echo" must be true`},
		{"bad status", `{"steps":[{"events":[{"error":{"status":42}}]}]}`, "status 42 is not an HTTP status"},
		{"bad kind", `{"steps":[{"events":[{"error":{"kind":"meltdown"}}]}]}`, `kind "meltdown"`},
		{"negative retry after", `{"steps":[{"events":[{"error":{"retryAfterMs":-1}}]}]}`, "retryAfterMs must be between"},
		{"wrong type", `{"steps":[{"events":[{"text":5}]}]}`, "cannot unmarshal number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseScript([]byte(tt.src))
			if err == nil {
				t.Fatalf("ParseScript accepted %s: %+v", tt.src, s)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "script: ") {
				t.Fatalf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestScriptedEveryEventKind(t *testing.T) {
	s := mustScript(t, `{"steps":[{
		"events":[
			{"thinking":"hmm "},
			{"text":"ab","repeat":3},
			{"echo":true},
			{"delayMs":1500},
			{"toolCall":{"id":"call_x","name":"Bash","input":{"command":"ls"}}},
			{"toolCall":{"name":"Read"}}
		],
		"usage":{"input":11,"output":22,"cacheRead":3,"reasoning":4}
	}]}`)
	clock := newFakeClock()
	p := NewScripted(s, clock)
	req := Request{Messages: []Message{{Role: RoleUser, Text: "first"}, {Role: RoleAssistant, Text: "x"}, {Role: RoleUser, Text: "say this"}}}

	run := func() ([]Event, Finish) {
		var events []Event
		done := make(chan stepResult, 1)
		go func() {
			fin, err := p.Stream(context.Background(), req, collect(&events))
			done <- stepResult{fin, err}
		}()
		clock.waitTimer(t, 1500*time.Millisecond)
		clock.Advance(1500 * time.Millisecond)
		r := waitResult(t, done)
		if r.err != nil {
			t.Fatal(r.err)
		}
		return events, r.fin
	}
	events, fin := run()
	if len(events) != 7 {
		t.Fatalf("events = %+v", events)
	}
	want := []Event{
		{Kind: EventThinking, Text: "hmm "},
		{Kind: EventText, Text: "ab"}, {Kind: EventText, Text: "ab"}, {Kind: EventText, Text: "ab"},
		{Kind: EventText, Text: "say this"},
		{Kind: EventToolCall, ToolCall: ToolCall{ID: "call_x", Name: "Bash", Input: json.RawMessage(`{"command":"ls"}`)}},
	}
	if !reflect.DeepEqual(events[:6], want) {
		t.Fatalf("events:\n got %+v\nwant %+v", events[:6], want)
	}
	gen := events[6].ToolCall
	if events[6].Kind != EventToolCall || gen.Name != "Read" || string(gen.Input) != "{}" || !strings.HasPrefix(gen.ID, "call_") || len(gen.ID) < 10 {
		t.Fatalf("generated tool call = %+v", events[6])
	}
	wantFin := Finish{Reason: FinishToolCalls, RawReason: "tool-calls", Usage: &Usage{InputTokens: 11, OutputTokens: 22, CacheReadTokens: 3, ReasoningTokens: 4}}
	if !reflect.DeepEqual(fin, wantFin) {
		t.Fatalf("finish = %+v, want %+v", fin, wantFin)
	}
	again, _ := run()
	if again[6].ToolCall.ID == gen.ID {
		t.Fatalf("generated tool call id %q repeated", gen.ID)
	}
}

func TestScriptedStepSelection(t *testing.T) {
	s := mustScript(t, `{"steps":[
		{"events":[{"text":"step one"}],"finish":"length"},
		{"events":[{"text":"step two"}]}
	]}`)
	p := NewScripted(s, newFakeClock())
	user := Message{Role: RoleUser, Text: "go"}
	asst := Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c", Name: "X"}}}
	tool := Message{Role: RoleTool, ToolCallID: "c", Text: "done"}
	tests := []struct {
		name   string
		msgs   []Message
		text   string
		finish FinishReason
	}{
		{"first step", []Message{user}, "step one", FinishLength},
		{"after one tool round", []Message{user, asst, tool}, "step two", FinishStop},
		{"new turn restarts", []Message{user, asst, tool, {Role: RoleAssistant, Text: "ok"}, user}, "step one", FinishLength},
		{"no messages", nil, "step one", FinishLength},
		{"a tail note is not the user", []Message{user, asst, tool, {Role: RoleUser, Text: "<task-ledger>", Note: true}}, "step two", FinishStop},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var events []Event
			fin, err := p.Stream(context.Background(), Request{Messages: tt.msgs}, collect(&events))
			if err != nil || len(events) != 1 || events[0].Text != tt.text || fin.Reason != tt.finish {
				t.Fatalf("got %+v %+v %v; want %q %s", events, fin, err, tt.text, tt.finish)
			}
		})
	}
	_, err := p.Stream(context.Background(), Request{Messages: []Message{user, asst, tool, asst, tool}}, discard)
	var f *Failure
	if !errors.As(err, &f) || f.Kind != FailureUnknown || !strings.Contains(f.Message, "the script has 2 steps; step 3") {
		t.Fatalf("past the end: err = %v", err)
	}
}

func TestScriptedErrorTimes(t *testing.T) {
	s := mustScript(t, `{"steps":[{"events":[
		{"error":{"status":429,"message":"slow down","retryAfterMs":500,"times":2}},
		{"text":"ok"}
	]}]}`)
	clock := newFakeClock()
	var calls atomic.Int32
	inner := NewScripted(s, clock)
	p := providerFunc(func(ctx context.Context, req Request, emit func(Event) error) (Finish, error) {
		calls.Add(1)
		return inner.Stream(ctx, req, emit)
	})
	turn := func(msgs []Message) {
		t.Helper()
		calls.Store(0)
		var events []Event
		var rec retryRecorder
		res := make(chan stepResult, 1)
		go func() {
			fin, err := StreamStep(context.Background(), p, Request{Messages: msgs}, StepOptions{Clock: clock, OnRetry: rec.record}, collect(&events))
			res <- stepResult{fin, err}
		}()
		for range 2 {
			clock.waitTimer(t, 500*time.Millisecond)
			clock.Advance(500 * time.Millisecond)
		}
		r := waitResult(t, res)
		if r.err != nil || calls.Load() != 3 || len(events) != 1 || events[0].Text != "ok" {
			t.Fatalf("err = %v, calls = %d, events %+v; want success on the third attempt", r.err, calls.Load(), events)
		}
		if infos := rec.get(); len(infos) != 4 || infos[0].Reason != FailureRateLimit || infos[0].Delay != 500*time.Millisecond {
			t.Fatalf("retries %+v", infos)
		}
	}
	first := []Message{{Role: RoleUser, Text: "hello"}}
	turn(first)
	// The next turn of the same conversation fails twice again.
	turn(append(first, Message{Role: RoleAssistant, Text: "ok"}, Message{Role: RoleUser, Text: "again"}))

	// Kind and defaults of a scripted failure.
	s2 := mustScript(t, `{"steps":[{"events":[{"text":"partial"},{"error":{"kind":"network","message":"link down"}}]}]}`)
	_, err := NewScripted(s2, clock).Stream(context.Background(), Request{}, discard)
	var f *Failure
	if !errors.As(err, &f) || f.Kind != FailureNetwork || f.Message != "link down" || f.RetryAfterSet {
		t.Fatalf("err = %#v", err)
	}
	s3 := mustScript(t, `{"steps":[{"events":[{"error":{"status":401}}]}]}`)
	_, err = NewScripted(s3, clock).Stream(context.Background(), Request{}, discard)
	if !errors.As(err, &f) || f.Kind != FailureAuth || f.Status != 401 || f.Message != "scripted error" {
		t.Fatalf("err = %#v", err)
	}
}

func TestScriptedCancelDuringDelay(t *testing.T) {
	s := mustScript(t, `{"steps":[{"events":[{"text":"a"},{"delayMs":60000},{"text":"b"}]}]}`)
	clock := newFakeClock()
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("stop")
	var events []Event
	res := make(chan stepResult, 1)
	go func() {
		fin, err := NewScripted(s, clock).Stream(ctx, Request{}, collect(&events))
		res <- stepResult{fin, err}
	}()
	clock.waitTimer(t, time.Minute)
	cancel(cause)
	if r := waitResult(t, res); r.err != cause || len(events) != 1 {
		t.Fatalf("err = %v events %+v; want the cause after one event", r.err, events)
	}
}

func TestScriptedEmitError(t *testing.T) {
	s := mustScript(t, `{"steps":[{"events":[{"text":"a","repeat":5}]}]}`)
	sink := errors.New("sink full")
	n := 0
	_, err := NewScripted(s, nil).Stream(context.Background(), Request{}, func(Event) error {
		n++
		return sink
	})
	if err != sink || n != 1 {
		t.Fatalf("err = %v after %d events; want the emit error after one", err, n)
	}
}

func TestLoadScript(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "demo.json")
	if err := os.WriteFile(path, []byte(`{"steps":[{"events":[{"text":"hi"}]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := LoadScript(path)
	if err != nil || len(s.Steps) != 1 {
		t.Fatalf("LoadScript = %+v, %v", s, err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"steps":[{"events":[{"nope":1}]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadScript(bad); err == nil || !strings.Contains(err.Error(), "bad.json") {
		t.Fatalf("LoadScript(bad) error %v does not name the file", err)
	}
	if _, err := LoadScript(filepath.Join(dir, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

// FuzzParseScript checks that ParseScript never panics and that an
// accepted script survives a JSON round trip unchanged.
func FuzzParseScript(f *testing.F) {
	f.Add([]byte(`{"steps":[{"events":[{"text":"hi","repeat":2},{"toolCall":{"name":"Bash","input":{"command":"ls"}}}],"finish":"tool-calls","usage":{"input":1,"output":2}}]}`))
	f.Add([]byte(`{"steps":[{"events":[{"error":{"status":503,"times":3}},{"echo":true},{"delayMs":0}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseScript(b)
		if err != nil {
			if s != nil {
				t.Fatal("a script returned with an error")
			}
			if !strings.HasPrefix(err.Error(), "script: ") {
				t.Fatalf("error without the script prefix: %v", err)
			}
			return
		}
		once, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("marshal accepted script: %v", err)
		}
		s2, err := ParseScript(once)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", once, err)
		}
		twice, err := json.Marshal(s2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(once, twice) {
			t.Fatalf("round trip changed the script:\n%s\n%s", once, twice)
		}
	})
}
