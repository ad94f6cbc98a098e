package tui

import (
	"context"
	"fmt"
	"strings"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/maka-agent/maka/protocol"
)

// Bounds of the task panel.
const (
	// maxTaskLines is how many tasks the panel shows; a last line counts
	// the others.
	maxTaskLines = 4
	// maxLedgerPages bounds the pages one read of the ledger follows (the
	// ledger holds at most 200 tasks, 128 per page), and ledgerAttempts the
	// restarts when it changes while it is read.
	maxLedgerPages = 8
	ledgerAttempts = 3
)

// taskToolNames are the tools that change the task ledger: their results
// make the panel read it again.
var taskToolNames = map[string]bool{"task_create": true, "task_update": true}

// tasksMsg is a read of the current session's task ledger.
type tasksMsg struct {
	gen, seq int
	tasks    []protocol.Task
	err      error
}

// readLedger reads every page of a session's task ledger with
// task.ledger.query, starting again when it changes between pages.
func readLedger(ctx context.Context, be Backend, sessionID string) ([]protocol.Task, error) {
	for range ledgerAttempts {
		res, err := be.QueryTaskLedger(ctx, protocol.TaskLedgerQueryInput{SessionID: sessionID, Kind: protocol.TaskQueryListStart})
		if err != nil {
			return nil, err
		}
		tasks := res.Tasks
		for pages := 1; res.Kind == protocol.TaskResultPage && res.NextCursor != nil; pages++ {
			if pages >= maxLedgerPages {
				return nil, fmt.Errorf("task ledger of %s has more than %d pages", sessionID, maxLedgerPages)
			}
			res, err = be.QueryTaskLedger(ctx, protocol.TaskLedgerQueryInput{SessionID: sessionID,
				Kind: protocol.TaskQueryListContinue, Revision: res.Revision, Cursor: *res.NextCursor})
			if err != nil {
				return nil, err
			}
			tasks = append(tasks, res.Tasks...)
		}
		if res.Kind == protocol.TaskResultPage {
			return tasks, nil
		}
		// revision_changed: read it again from the start.
	}
	return nil, fmt.Errorf("task ledger of %s kept changing while it was read", sessionID)
}

// loadTasks reads the current session's ledger for the panel.
func (m *model) loadTasks() tea.Cmd {
	if m.session == nil {
		return nil
	}
	m.tasksSeq++
	be, gen, seq, id := m.be, m.gen, m.tasksSeq, m.session.SessionID
	return m.task(func(ctx context.Context) tea.Msg {
		tasks, err := withTimeout(ctx, callTimeout, func(ctx context.Context) ([]protocol.Task, error) {
			return readLedger(ctx, be, id)
		})
		return tasksMsg{gen: gen, seq: seq, tasks: tasks, err: err}
	})
}

func (m *model) onTasks(msg tasksMsg) tea.Cmd {
	if msg.gen != m.gen || msg.seq != m.tasksSeq {
		return nil
	}
	if msg.err != nil {
		m.fail("tasks", msg.err)
		return nil
	}
	m.tasks = msg.tasks
	return nil
}

// onTaskToolEvent notes the task tool calls of a tool event and reads the
// ledger again once one has a result.
func (m *model) onTaskToolEvent(ev protocol.SessionToolEvent) tea.Cmd {
	switch ev.Type {
	case protocol.ToolStart:
		if taskToolNames[ev.ToolName] {
			m.taskCalls[ev.ToolUseID] = true
		}
	case protocol.ToolResult:
		if m.taskCalls[ev.ToolUseID] {
			delete(m.taskCalls, ev.ToolUseID)
			return m.loadTasks()
		}
	}
	return nil
}

// taskMarks are the panel's status marks.
var taskMarks = map[protocol.TaskStatus]string{
	protocol.TaskPending:    "○",
	protocol.TaskInProgress: "◐",
	protocol.TaskBlocked:    "■",
	protocol.TaskCompleted:  "●",
	protocol.TaskFailed:     "✗",
	protocol.TaskCancelled:  "–",
}

// tasksView is the task panel: the open tasks of the session, at most
// maxTaskLines of them, and how many have ended; "" when none is open.
func (m *model) tasksView() string {
	var open []protocol.Task
	ended := 0
	for _, t := range m.tasks {
		switch t.Status {
		case protocol.TaskCompleted, protocol.TaskFailed, protocol.TaskCancelled:
			ended++
		default:
			open = append(open, t)
		}
	}
	if len(open) == 0 {
		return ""
	}
	head := fmt.Sprintf("Tasks: %d open", len(open))
	if ended > 0 {
		head += fmt.Sprintf(", %d done", ended)
	}
	lines := []string{m.look.hint.Render(head)}
	for i, t := range open {
		if i == maxTaskLines {
			lines = append(lines, m.look.hint.Render(fmt.Sprintf("  … %d more", len(open)-maxTaskLines)))
			break
		}
		l := "  " + taskMarks[t.Status] + " " + t.Key + " " + firstLine(sanitize(t.Subject))
		if t.Status == protocol.TaskBlocked && t.BlockedReason != "" {
			l += " (blocked: " + firstLine(sanitize(t.BlockedReason)) + ")"
		}
		lines = append(lines, m.look.queue.MaxWidth(m.width).Render(l))
	}
	return strings.Join(lines, "\n")
}
