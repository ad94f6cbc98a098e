package tasks

import (
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/maka-agent/maka/protocol"
)

// utf16Len is the length the original counts.
func utf16Len(s string) int { return len(utf16.Encode([]rune(s))) }

func task(key string, status protocol.TaskStatus, subject string, updated int64) protocol.Task {
	t := protocol.Task{ID: "id-" + key, Key: key, Subject: subject, Status: status,
		CreatedAt: protocol.TaskTime(updated), UpdatedAt: protocol.TaskTime(updated)}
	if terminal(status) {
		e := protocol.TaskTime(updated)
		t.EndedAt = &e
	}
	switch status {
	case protocol.TaskCompleted:
		t.CompletionEvidence = "evidence of " + key
	case protocol.TaskFailed:
		t.FailureReason = "failure of " + key
	case protocol.TaskBlocked:
		t.BlockedReason = "blocker of " + key
	}
	return t
}

// noteLines are the task lines of a note, in order.
func noteLines(note string) []string {
	var out []string
	for _, l := range strings.Split(note, "\n") {
		if strings.HasPrefix(l, "- ") {
			out = append(out, l)
		}
	}
	return out
}

func TestRenderTailNoOpenTask(t *testing.T) {
	for name, list := range map[string][]protocol.Task{
		"empty":         nil,
		"only terminal": {task("T1", protocol.TaskCompleted, "a", 1), task("T2", protocol.TaskCancelled, "b", 2)},
	} {
		if got := RenderTail(list); got != "" {
			t.Errorf("%s: note %q, want none", name, got)
		}
	}
}

func TestRenderTailOpenThenThreeRecentTerminal(t *testing.T) {
	list := []protocol.Task{
		task("T1", protocol.TaskCompleted, "oldest done", 10),
		task("T2", protocol.TaskInProgress, "working", 20),
		task("T3", protocol.TaskFailed, "broke", 50),
		task("T4", protocol.TaskCancelled, "dropped", 40),
		task("T5", protocol.TaskBlocked, "waiting", 30),
		task("T6", protocol.TaskCompleted, "newest done", 60),
		task("T7", protocol.TaskPending, "next", 70),
	}
	note := RenderTail(list)
	if !strings.HasPrefix(note, TailOpenTag+"\n") || !strings.HasSuffix(note, "\n"+TailCloseTag) {
		t.Fatalf("note not wrapped in the ledger tags: %q", note)
	}
	want := []string{
		"- T2 [in_progress] working",
		"- T5 [blocked] waiting — blocked: blocker of T5",
		"- T7 [pending] next",
		"- T6 [completed] newest done — evidence: evidence of T6",
		"- T3 [failed] broke — failed: failure of T3",
		"- T4 [cancelled] dropped",
	}
	got := noteLines(note)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("note lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(note, "Recently ended:\n- T6") {
		t.Fatalf("terminal tasks not under their heading: %q", note)
	}
}

// TestRenderTailBound fills a ledger to its limit with the longest
// subjects (astral characters, two UTF-16 units each) and reasons: the
// note stays within TailMaxChars, keeps the first open tasks in order, and
// says how many lines it left out.
func TestRenderTailBound(t *testing.T) {
	long := strings.Repeat("𝔸", protocol.TaskSubjectMaxCodePoints)
	reason := strings.Repeat("r", protocol.TaskEvidenceMaxCodePoints)
	var list []protocol.Task
	for i := range MaxTasksPerSession {
		tk := task("T"+strconv.Itoa(i+1), protocol.TaskBlocked, long, int64(i))
		tk.BlockedReason = reason
		list = append(list, tk)
	}
	note := RenderTail(list)
	if n := utf16Len(note); n > TailMaxChars {
		t.Fatalf("note is %d UTF-16 units, more than %d", n, TailMaxChars)
	}
	if !strings.HasSuffix(note, TailCloseTag) {
		t.Fatalf("a cut note lost its closing tag: %q", note[len(note)-100:])
	}
	lines := noteLines(note)
	if len(lines) == 0 || len(lines) >= MaxTasksPerSession {
		t.Fatalf("%d task lines", len(lines))
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, "- T"+strconv.Itoa(i+1)+" [blocked] ") {
			t.Fatalf("line %d: %q", i, l[:40])
		}
		// A reason is cut inside the note.
		if n := utf16Len(l); n > 2*protocol.TaskSubjectMaxCodePoints+tailReasonMaxChars+40 {
			t.Fatalf("line %d is %d units", i, n)
		}
	}
	omitted := "… " + strconv.Itoa(MaxTasksPerSession-len(lines)) + " more lines left out (task_list shows them)"
	if !strings.Contains(note, omitted) {
		t.Fatalf("note does not count what it left out (%q): ...%q", omitted, note[len(note)-200:])
	}
}

// TestRenderTailExactFit checks the bound at every size around it: whatever
// the number of open tasks, the note never passes TailMaxChars, and a
// ledger whose lines all fit is never cut.
func TestRenderTailExactFit(t *testing.T) {
	subject := strings.Repeat("s", 100)
	for n := 1; n <= 90; n++ {
		var list []protocol.Task
		for i := range n {
			list = append(list, task("T"+strconv.Itoa(i+1), protocol.TaskPending, subject, int64(i)))
		}
		note := RenderTail(list)
		if u := utf16Len(note); u > TailMaxChars {
			t.Fatalf("%d tasks: note is %d units", n, u)
		}
		lines := noteLines(note)
		cut := strings.Contains(note, "more lines left out")
		if cut == (len(lines) == n) {
			t.Fatalf("%d tasks: %d lines shown, cut %v", n, len(lines), cut)
		}
	}
}

// TestTailReadsTheSessionLedger renders the note from the store: another
// session's tasks never appear, and a change shows in the next note.
func TestTailReadsTheSessionLedger(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	if got := e.l.Tail(ctx, "session-a"); got != "" {
		t.Fatalf("empty ledger: note %q", got)
	}
	e.create("session-a", "alpha task")
	e.create("session-b", "beta task")
	note := e.l.Tail(ctx, "session-a")
	if !strings.Contains(note, "- T1 [pending] alpha task") || strings.Contains(note, "beta") {
		t.Fatalf("note of session-a: %q", note)
	}
	e.update("session-a", "T1", Change{Status: protocol.TaskInProgress})
	e.clock.Advance(time.Second)
	if note := e.l.Tail(ctx, "session-a"); !strings.Contains(note, "- T1 [in_progress] alpha task") {
		t.Fatalf("note after the change: %q", note)
	}
}
