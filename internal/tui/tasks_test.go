package tui

import (
	"strings"
	"testing"

	"github.com/maka-agent/maka/protocol"
)

func ledgerTask(key, subject string, status protocol.TaskStatus) protocol.Task {
	return protocol.Task{ID: "id-" + key, Key: key, Subject: subject, Status: status}
}

// TestTaskPanelFollowsTheLedger: the panel shows the session's open tasks
// when it is attached (read over several pages), and reads the ledger again
// when a task tool's result arrives, not for other tools.
func TestTaskPanelFollowsTheLedger(t *testing.T) {
	be := newFakeBackend()
	be.addSession(summary("s1", "first"), snapshot("s1", 1, turn("s1", "t1", protocol.TurnRunning)))
	be.ledgerPage = 2
	be.setLedger("s1",
		ledgerTask("T1", "Write the parser", protocol.TaskInProgress),
		ledgerTask("T2", "Old work", protocol.TaskCompleted),
		ledgerTask("T3", "Test the parser", protocol.TaskPending))
	h := newHarness(t, be, Options{ResumeSessionID: "s1", Workspace: "/work"})
	h.attached()
	h.until("the task panel", func() bool { return strings.Contains(h.m.View(), "Tasks: 2 open, 1 done") })
	view := h.m.View()
	for _, want := range []string{"◐ T1 Write the parser", "○ T3 Test the parser"} {
		if !strings.Contains(view, want) {
			t.Fatalf("view lacks %q:\n%s", want, view)
		}
	}
	if strings.Contains(view, "Old work") {
		t.Fatalf("an ended task is listed:\n%s", view)
	}
	reads := get(be, func() int { return be.ledgerReads })

	// Another tool's result reads nothing.
	h.push(
		toolEvent(protocol.SessionToolEvent{Type: protocol.ToolStart, ID: "e1", ToolUseID: "call1", ToolName: "Read"}),
		toolEvent(protocol.SessionToolEvent{Type: protocol.ToolResult, ID: "e2", ToolUseID: "call1", Status: "completed"}),
	)
	if n := get(be, func() int { return be.ledgerReads }); n != reads {
		t.Fatalf("a Read result read the ledger (%d reads, want %d)", n, reads)
	}

	// The model completes T1 and blocks T3.
	h.push(toolEvent(protocol.SessionToolEvent{Type: protocol.ToolStart, ID: "e3", ToolUseID: "call2", ToolName: "task_update"}))
	done := ledgerTask("T1", "Write the parser", protocol.TaskCompleted)
	blocked := ledgerTask("T3", "Test the parser", protocol.TaskBlocked)
	blocked.BlockedReason = "needs fixtures"
	be.setLedger("s1", done, ledgerTask("T2", "Old work", protocol.TaskCompleted), blocked)
	h.push(toolEvent(protocol.SessionToolEvent{Type: protocol.ToolResult, ID: "e4", ToolUseID: "call2", Status: "completed"}))
	h.until("the panel to follow the ledger", func() bool { return strings.Contains(h.m.View(), "Tasks: 1 open, 2 done") })
	view = h.m.View()
	if !strings.Contains(view, "■ T3 Test the parser (blocked: needs fixtures)") || strings.Contains(view, "T1 Write") {
		t.Fatalf("view after the change:\n%s", view)
	}

	// Nothing open: no panel.
	be.setLedger("s1", done)
	h.push(
		toolEvent(protocol.SessionToolEvent{Type: protocol.ToolStart, ID: "e5", ToolUseID: "call3", ToolName: "task_create"}),
		toolEvent(protocol.SessionToolEvent{Type: protocol.ToolResult, ID: "e6", ToolUseID: "call3", Status: "completed"}),
	)
	h.until("the panel to go", func() bool { return !strings.Contains(h.m.View(), "Tasks:") })
}

// TestTaskPanelIsBounded: a long ledger shows maxTaskLines tasks and
// counts the rest.
func TestTaskPanelIsBounded(t *testing.T) {
	be := newFakeBackend()
	be.addSession(summary("s1", "first"), snapshot("s1", 1, nil))
	var list []protocol.Task
	for i := range 9 {
		list = append(list, ledgerTask("T"+string(rune('1'+i)), "task number "+string(rune('1'+i)), protocol.TaskPending))
	}
	be.setLedger("s1", list...)
	h := newHarness(t, be, Options{ResumeSessionID: "s1", Workspace: "/work"})
	h.attached()
	h.until("the task panel", func() bool { return strings.Contains(h.m.View(), "Tasks: 9 open") })
	view := h.m.View()
	if !strings.Contains(view, "T4 task number 4") || strings.Contains(view, "T5 task") || !strings.Contains(view, "… 5 more") {
		t.Fatalf("panel not bounded:\n%s", view)
	}
}
