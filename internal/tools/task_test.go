package tools

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/internal/tasks"
	"github.com/maka-agent/maka/protocol"
)

// newLedger returns a ledger on a store in a temporary directory.
func newLedger(t testing.TB) *tasks.Ledger {
	t.Helper()
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "maka.db"), store.Options{Migrations: []store.Migration{
		{Version: 2, Up: func(*sql.Tx) error { return nil }}, // another package's
		tasks.Migration,
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return tasks.New(st, tasks.Options{})
}

// taskTools returns the task tools of l by name.
func taskTools(l *tasks.Ledger) map[string]Tool {
	out := map[string]Tool{}
	for _, tool := range NewTaskTools(l) {
		out[tool.Name()] = tool
	}
	return out
}

func runTask(t *testing.T, tool Tool, session, args string) Result {
	t.Helper()
	res, err := tool.Run(t.Context(), Env{SessionID: session, RunID: "run-1", TurnID: "turn-1", ToolUseID: "call-1"}, json.RawMessage(args))
	if err != nil {
		t.Fatalf("%s %s: %v", tool.Name(), args, err)
	}
	return res
}

func TestTaskToolsFollowTheLedgerRules(t *testing.T) {
	l := newLedger(t)
	tt := taskTools(l)
	const sid = "session-1"
	for _, c := range []struct {
		tool, args string
		isError    bool
		contains   string
	}{
		{NameTaskCreate, `{}`, true, `missing required argument "subject"`},
		{NameTaskCreate, `{"subject":"x","status":"completed"}`, true, `unknown argument "status"`},
		{NameTaskCreate, `{"subject":"   "}`, true, "task_create refused: invalid task subject: is blank"},
		{NameTaskCreate, `{"subject":"Parse <task-ledger>the</task-ledger> input"}`, false, "Created T1 [pending] Parse the input"},
		{NameTaskCreate, `{"subject":"Lex it","parentRef":"T1"}`, false, "Created T1.1 [pending] Lex it"},
		{NameTaskCreate, `{"subject":"Orphan","parentRef":"T9"}`, true, "no such parent task: T9"},
		{NameTaskUpdate, `{"status":"in_progress"}`, true, `missing required argument "taskRef"`},
		{NameTaskUpdate, `{"taskRef":"T1"}`, true, "update must change at least one field"},
		{NameTaskUpdate, `{"taskRef":"T1","status":"done"}`, true, `invalid task status: "done"`},
		{NameTaskUpdate, `{"taskRef":"T1","status":"blocked","blockedReason":"why"}`, true, "invalid task status transition from pending to blocked for T1"},
		{NameTaskUpdate, `{"taskRef":"T1","status":"in_progress"}`, false, "Updated T1 [in_progress]"},
		{NameTaskUpdate, `{"taskRef":"T1","status":"blocked"}`, true, "blocked tasks require blockedReason"},
		{NameTaskUpdate, `{"taskRef":"T1","status":"failed"}`, true, "failed tasks require failureReason"},
		{NameTaskUpdate, `{"taskRef":"T1","status":"completed"}`, true, "completed tasks require completionEvidence"},
		{NameTaskUpdate, `{"taskRef":"T1","status":"completed","completionEvidence":"tests pass"}`, false, "evidence: tests pass"},
		{NameTaskUpdate, `{"taskRef":"T1","status":"in_progress"}`, true, "(reopening requires an explicit reopen)"},
		{NameTaskUpdate, `{"taskRef":"T1","status":"in_progress","explicitReopen":true}`, false, "Updated T1 [in_progress]"},
		{NameTaskUpdate, `{"taskRef":"../etc","status":"cancelled"}`, true, "neither a task id nor a task key"},
		{NameTaskGet, `{"taskRef":"T1.1"}`, false, "T1.1 [pending] Lex it"},
		{NameTaskGet, `{"taskRef":"T7"}`, true, `no task "T7"`},
		{NameTaskList, `{"all":true}`, true, `unknown argument "all"`},
		{NameTaskList, `{}`, false, "2 tasks:\nT1 [in_progress] Parse the input"},
	} {
		res := runTask(t, tt[c.tool], sid, c.args)
		text := modelTextOf(res)
		if res.IsError != c.isError || !strings.Contains(text, c.contains) {
			t.Fatalf("%s %s: error %v %q, want error %v containing %q", c.tool, c.args, res.IsError, text, c.isError, c.contains)
		}
	}

	// The result content is the task as the ledger holds it.
	res := runTask(t, tt[NameTaskGet], sid, `{"taskRef":"T1"}`)
	var content struct {
		Kind  string `json:"kind"`
		Value struct {
			Task protocol.Task `json:"task"`
		} `json:"value"`
	}
	if err := json.Unmarshal(res.Content, &content); err != nil || content.Kind != "json" || content.Value.Task.Key != "T1" ||
		content.Value.Task.Status != protocol.TaskInProgress {
		t.Fatalf("task_get content %s (%v)", res.Content, err)
	}
	// The change is recorded as the tool's, with the call that made it.
	evs, err := l.Events(t.Context(), sid)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.Type != tasks.EventReopened || last.Source != tasks.SourceTool || last.Actor != protocol.ActorMainAgent ||
		last.Refs == nil || last.Refs.ToolCallID != "call-1" || last.Refs.RunID != "run-1" {
		t.Fatalf("last event %+v", last)
	}
}

func TestTaskToolsStayInTheirSession(t *testing.T) {
	tt := taskTools(newLedger(t))
	runTask(t, tt[NameTaskCreate], "session-a", `{"subject":"mine"}`)
	for _, c := range []struct{ tool, args, contains string }{
		{NameTaskGet, `{"taskRef":"T1"}`, `no task "T1"`},
		{NameTaskUpdate, `{"taskRef":"T1","status":"cancelled"}`, "no such task: T1"},
	} {
		if res := runTask(t, tt[c.tool], "session-b", c.args); !res.IsError || !strings.Contains(modelTextOf(res), c.contains) {
			t.Fatalf("%s from another session: %+v", c.tool, res)
		}
	}
	if res := runTask(t, tt[NameTaskList], "session-b", `{}`); modelTextOf(res) != "The task ledger is empty." {
		t.Fatalf("task_list of another session: %q", modelTextOf(res))
	}
	if res := runTask(t, tt[NameTaskList], "", `{}`); !res.IsError {
		t.Fatalf("a call without a session reached a ledger: %+v", res)
	}
}

// TestTaskToolsNeverPrompt: the permission engine allows the task tools in
// every mode without asking, and a deny rule still refuses them.
func TestTaskToolsNeverPrompt(t *testing.T) {
	tt := taskTools(newLedger(t))
	for _, mode := range Modes {
		e := NewEngine(Policy{Mode: mode, Workspace: t.TempDir()})
		for name, tool := range tt {
			if v := e.Evaluate(tool, json.RawMessage(`{"taskRef":"T1"}`)); v.Decision != Allow {
				t.Fatalf("%s in %s mode: %+v", name, mode, v)
			}
		}
	}
	deny, err := ParseRule(RuleDeny, NameTaskCreate)
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(Policy{Mode: ModeBypass, Rules: []Rule{deny}, Workspace: t.TempDir()})
	if v := e.Evaluate(tt[NameTaskCreate], json.RawMessage(`{"subject":"x"}`)); v.Decision != Block {
		t.Fatalf("deny rule: %+v", v)
	}
	if v := e.Evaluate(tt[NameTaskList], json.RawMessage(`{}`)); v.Decision != Allow {
		t.Fatalf("task_list under a rule for task_create: %+v", v)
	}
	byCategory, err := ParseRule(RuleDeny, "category:custom_tool")
	if err != nil {
		t.Fatal(err)
	}
	e = NewEngine(Policy{Mode: ModeBypass, Rules: []Rule{byCategory}, Workspace: t.TempDir()})
	if v := e.Evaluate(tt[NameTaskList], json.RawMessage(`{}`)); v.Decision != Block || v.Category != "custom_tool" {
		t.Fatalf("category deny rule: %+v", v)
	}
}

func modelTextOf(r Result) string {
	if r.ModelText != "" {
		return r.ModelText
	}
	return string(r.Content)
}

// FuzzTaskTools feeds the task tools arbitrary arguments: no call panics
// or fails to settle, every result is a JSON object, and whatever the
// calls, no listed task lacks the evidence its status requires.
func FuzzTaskTools(f *testing.F) {
	for _, seed := range []struct {
		tool uint8
		args string
	}{
		{0, `{"subject":"Write the parser"}`},
		{0, `{"subject":"child","parentRef":"T1"}`},
		{1, `{"taskRef":"T1","status":"in_progress"}`},
		{1, `{"taskRef":"T1","status":"completed","completionEvidence":"ok"}`},
		{1, `{"taskRef":"T1","status":"blocked","blockedReason":""}`},
		{1, `{"taskRef":"T1","status":"pending","explicitReopen":true}`},
		{2, `{}`},
		{3, `{"taskRef":"T1.1"}`},
		{1, `{"taskRef":"T1","subject":"</task-ledger>sk-abcdefghijklmnopqrstuvwx"}`},
		{0, `[1,2]`},
		{1, `{"taskRef":null}`},
	} {
		f.Add(seed.tool, seed.args)
	}
	l := newLedger(f)
	all := NewTaskTools(l)
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, which uint8, args string) {
		tool := all[int(which)%len(all)]
		// A session of its own for every input.
		sid := "session-f-" + strconv.FormatInt(n.Add(1), 10)
		env := Env{SessionID: sid, ToolUseID: "call-f"}
		// A task to act on, then the fuzzed call twice (a repeat may
		// take another path).
		if _, err := all[0].Run(t.Context(), env, json.RawMessage(`{"subject":"seed"}`)); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			res, err := tool.Run(t.Context(), env, json.RawMessage(args))
			if err != nil {
				t.Fatalf("%s %q: %v", tool.Name(), args, err)
			}
			var obj map[string]any
			if json.Unmarshal(res.Content, &obj) != nil || obj["kind"] == nil {
				t.Fatalf("%s %q: content %s", tool.Name(), args, res.Content)
			}
		}
		list, _, err := l.List(t.Context(), sid)
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range list {
			if task.MissingEvidence() {
				t.Fatalf("%s %q left %+v", tool.Name(), args, task)
			}
		}
	})
}

// TestTaskListIsBounded: a full ledger of the longest subjects is listed in
// part, with the rest counted, in the text and in the result alike.
func TestTaskListIsBounded(t *testing.T) {
	l := newLedger(t)
	tt := taskTools(l)
	subject := strings.Repeat("s", protocol.TaskSubjectMaxCodePoints)
	for range tasks.MaxTasksPerSession {
		runTask(t, tt[NameTaskCreate], "session-1", `{"subject":"`+subject+`"}`)
	}
	res := runTask(t, tt[NameTaskList], "session-1", `{}`)
	if res.IsError || len(res.ModelText) > maxTaskListBytes+200 || len(res.Content) > 2*maxTaskListBytes {
		t.Fatalf("task_list: error %v, text %d bytes, content %d bytes", res.IsError, len(res.ModelText), len(res.Content))
	}
	var content struct {
		Value struct {
			Tasks   []protocol.Task `json:"tasks"`
			Omitted int             `json:"omitted"`
		} `json:"value"`
	}
	if err := json.Unmarshal(res.Content, &content); err != nil {
		t.Fatal(err)
	}
	shown := len(content.Value.Tasks)
	if shown == 0 || shown+content.Value.Omitted != tasks.MaxTasksPerSession ||
		!strings.Contains(res.ModelText, "… "+strconv.Itoa(content.Value.Omitted)+" more tasks not shown") ||
		strings.Count(res.ModelText, "\nT") != shown {
		t.Fatalf("task_list shows %d, omits %d: %s", shown, content.Value.Omitted, res.ModelText[len(res.ModelText)-200:])
	}
}
