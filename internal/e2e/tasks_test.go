package e2e_test

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf16"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/internal/tasks"
	"github.com/maka-agent/maka/protocol"
)

// firstUser is the text of a request's first user message: the prompt of a
// session's first turn.
func firstUser(r *modeltest.Request) string {
	for _, m := range r.Messages {
		if m.Role == "user" {
			return m.Text()
		}
	}
	return ""
}

// toolMessages are a request's tool results, in order.
func toolMessages(r *modeltest.Request) []modeltest.Message {
	var out []modeltest.Message
	for _, m := range r.Messages {
		if m.Role == "tool" {
			out = append(out, m)
		}
	}
	return out
}

// ledgerNote is the task ledger note at the tail of a request: its last
// message when that is a user message holding the ledger tags, else "".
func ledgerNote(r *modeltest.Request) string {
	if len(r.Messages) == 0 {
		return ""
	}
	last := r.Messages[len(r.Messages)-1]
	if last.Role != "user" || !strings.HasPrefix(last.Text(), tasks.TailOpenTag) {
		return ""
	}
	return last.Text()
}

// queryLedger reads a session's whole task ledger with task.ledger.query.
func queryLedger(t *testing.T, c *client.Conn, sid string) ([]protocol.Task, string) {
	t.Helper()
	res, err := c.QueryTaskLedger(opCtx(t), protocol.TaskLedgerQueryInput{SessionID: sid, Kind: protocol.TaskQueryListStart})
	if err != nil {
		t.Fatalf("task.ledger.query %s: %v", sid, err)
	}
	if res.Kind != protocol.TaskResultPage || res.NextCursor != nil {
		t.Fatalf("task.ledger.query %s: %+v", sid, res)
	}
	return res.Tasks, res.Revision
}

// TestModelKeepsItsTaskLedger drives the task tools end to end: in an
// explore session (the strictest mode, where no prompt is ever answered) the
// model creates two tasks, tries transitions the ledger refuses, starts and
// completes one with evidence and lists them. It sees each refusal as a tool
// error, every later request ends with the open tasks, task.ledger.query
// returns the change, and a second session sees none of it.
func TestModelKeepsItsTaskLedger(t *testing.T) {
	const (
		promptA  = "Plan the parser work."
		promptB  = "Look at another session's tasks."
		evidence = "go test ./parser passed (12 tests)"
	)
	callA := []modeltest.Call{
		{ID: "c_create1", Name: "task_create", Arguments: args(t, map[string]any{"subject": "Write the parser"})},
		{ID: "c_create2", Name: "task_create", Arguments: args(t, map[string]any{"subject": "Test the parser"})},
		{ID: "c_skip", Name: "task_update", Arguments: args(t, map[string]any{"taskRef": "T1", "status": "completed", "completionEvidence": evidence})},
		{ID: "c_start", Name: "task_update", Arguments: args(t, map[string]any{"taskRef": "T1", "status": "in_progress"})},
		{ID: "c_bare", Name: "task_update", Arguments: args(t, map[string]any{"taskRef": "T1", "status": "completed"})},
		{ID: "c_done", Name: "task_update", Arguments: args(t, map[string]any{"taskRef": "T1", "status": "completed", "completionEvidence": evidence})},
		{ID: "c_list", Name: "task_list", Arguments: `{}`},
	}
	callB := []modeltest.Call{
		{ID: "b_get", Name: "task_get", Arguments: args(t, map[string]any{"taskRef": "T1"})},
		{ID: "b_update", Name: "task_update", Arguments: args(t, map[string]any{"taskRef": "T1", "status": "cancelled"})},
		{ID: "b_list", Name: "task_list", Arguments: `{}`},
	}
	var mu sync.Mutex
	bySession := map[string][]*modeltest.Request{}
	h := newHost(t, func(req *modeltest.Request) modeltest.Reply {
		prompt := firstUser(req)
		mu.Lock()
		bySession[prompt] = append(bySession[prompt], req)
		mu.Unlock()
		calls := callA
		if prompt == promptB {
			calls = callB
		}
		if n := len(toolMessages(req)); n < len(calls) {
			call := calls[n]
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Call: &call}}}
		}
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "done"}}}
	})
	c := h.conn
	createSession(t, c, "tasks-a", string(protocol.PermissionModeExplore))
	createSession(t, c, "tasks-b", string(protocol.PermissionModeExplore))
	empty, emptyRevision := queryLedger(t, c, "tasks-a")
	if len(empty) != 0 {
		t.Fatalf("a new session's ledger: %+v", empty)
	}

	w := watch(t, c, "tasks-a")
	startTurn(t, c, "tasks-a", "turn-a", promptA)
	frames := w.untilTerminal(t, "turn-a")
	if got := queryTurn(t, c, "tasks-a", "turn-a"); got.Status != protocol.TurnCompleted {
		t.Fatalf("turn-a: %+v", got)
	}
	if p := pendingPrompts(frames); len(p) != 0 {
		t.Fatalf("a task tool asked for approval: %+v", p)
	}
	// Subscribers see every change as the result of a task tool.
	status := map[string]string{}
	for _, f := range frames {
		if ev, ok := f.(protocol.EventFrame); ok && ev.Event.Type == protocol.ToolResult {
			status[ev.Event.ToolUseID] = ev.Event.Status
		}
	}
	wantStatus := map[string]string{"c_create1": "completed", "c_create2": "completed", "c_skip": "errored",
		"c_start": "completed", "c_bare": "errored", "c_done": "completed", "c_list": "completed"}
	for id, want := range wantStatus {
		if status[id] != want {
			t.Fatalf("tool_result of %s: status %q, want %q (all: %v)", id, status[id], want, status)
		}
	}

	// The ledger as any client reads it.
	got, revision := queryLedger(t, c, "tasks-a")
	if revision == emptyRevision {
		t.Fatalf("the ledger revision did not change: %s", revision)
	}
	if len(got) != 2 {
		t.Fatalf("ledger of tasks-a: %+v", got)
	}
	t1, t2 := got[0], got[1]
	if t1.Key != "T1" || t1.Subject != "Write the parser" || t1.Status != protocol.TaskCompleted ||
		t1.CompletionEvidence != evidence || t1.EndedAt == nil || t1.ResumeTrust != protocol.ResumeTrusted {
		t.Fatalf("T1: %+v", t1)
	}
	if t2.Key != "T2" || t2.Subject != "Test the parser" || t2.Status != protocol.TaskPending {
		t.Fatalf("T2: %+v", t2)
	}

	// What the model saw.
	mu.Lock()
	seenA, seenB := slices.Clone(bySession[promptA]), slices.Clone(bySession[promptB])
	mu.Unlock()
	if len(seenA) != len(callA)+1 {
		t.Fatalf("session a made %d model requests, want %d", len(seenA), len(callA)+1)
	}
	if note := ledgerNote(seenA[0]); note != "" {
		t.Fatalf("the first request has a ledger note before any task exists: %q", note)
	}
	if last := seenA[0].Messages[len(seenA[0].Messages)-1]; last.Role != "user" || last.Text() != promptA {
		t.Fatalf("the first request does not end with the prompt: %+v", last)
	}
	results := toolMessages(seenA[len(seenA)-1])
	if len(results) != len(callA) {
		t.Fatalf("the last request carries %d tool results, want %d", len(results), len(callA))
	}
	for i, want := range []string{
		"Created T1 [pending] Write the parser",
		"Created T2 [pending] Test the parser",
		"task_update refused: invalid task status transition from pending to completed for T1",
		"Updated T1 [in_progress] Write the parser",
		"task_update refused: completed tasks require completionEvidence",
		"Updated T1 [completed] Write the parser",
		"2 tasks:\nT1 [completed] Write the parser",
	} {
		if results[i].ToolCallID != callA[i].ID || !strings.Contains(results[i].Text(), want) {
			t.Fatalf("tool result %d (%s): %q, want it to contain %q", i, results[i].ToolCallID, results[i].Text(), want)
		}
	}
	// Each request after the first ends with the open tasks, as they were
	// when it was sent.
	for i, want := range []struct{ has, lacks []string }{
		1: {has: []string{"- T1 [pending] Write the parser"}, lacks: []string{"T2"}},
		2: {has: []string{"- T1 [pending] Write the parser", "- T2 [pending] Test the parser"}},
		3: {has: []string{"- T1 [pending] Write the parser"}, lacks: []string{"completed"}},
		4: {has: []string{"- T1 [in_progress] Write the parser", "- T2 [pending]"}},
		5: {has: []string{"- T1 [in_progress] Write the parser"}},
		6: {has: []string{"- T2 [pending] Test the parser", "Recently ended:\n- T1 [completed] Write the parser — evidence: " + evidence},
			lacks: []string{"[in_progress]"}},
		7: {has: []string{"- T2 [pending] Test the parser", "- T1 [completed]"}},
	} {
		if i == 0 {
			continue
		}
		note := ledgerNote(seenA[i])
		if note == "" || !strings.HasSuffix(note, tasks.TailCloseTag) || len(utf16.Encode([]rune(note))) > tasks.TailMaxChars {
			t.Fatalf("request %d: ledger note %q", i, note)
		}
		for _, s := range want.has {
			if !strings.Contains(note, s) {
				t.Fatalf("request %d: ledger note %q lacks %q", i, note, s)
			}
		}
		for _, s := range want.lacks {
			if strings.Contains(note, s) {
				t.Fatalf("request %d: ledger note %q has %q", i, note, s)
			}
		}
	}

	// Another session sees none of it, and cannot change it.
	startTurn(t, c, "tasks-b", "turn-b", promptB)
	watch(t, c, "tasks-b").untilTerminal(t, "turn-b")
	mu.Lock()
	seenB = slices.Clone(bySession[promptB])
	mu.Unlock()
	if len(seenB) != len(callB)+1 {
		t.Fatalf("session b made %d model requests, want %d", len(seenB), len(callB)+1)
	}
	for i, r := range seenB {
		if note := ledgerNote(r); note != "" {
			t.Fatalf("session b request %d carries a ledger note: %q", i, note)
		}
	}
	resB := toolMessages(seenB[len(seenB)-1])
	for i, want := range []string{`task_get: no task "T1"`, "task_update refused: no such task: T1", "The task ledger is empty."} {
		if i >= len(resB) || !strings.Contains(resB[i].Text(), want) {
			t.Fatalf("session b tool result %d: %+v, want %q", i, resB, want)
		}
	}
	if gotB, _ := queryLedger(t, c, "tasks-b"); len(gotB) != 0 {
		t.Fatalf("ledger of tasks-b: %+v", gotB)
	}
	if again, rev := queryLedger(t, c, "tasks-a"); rev != revision || !slices.EqualFunc(again, got, func(a, b protocol.Task) bool {
		return a.ID == b.ID && a.Status == b.Status
	}) {
		t.Fatalf("session b changed session a's ledger: %+v", again)
	}
}
