package tasks

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/maka-agent/maka/protocol"
)

// Bounds of the ledger note at the tail of each model request
// (docs/architecture.md, The task ledger in a turn).
const (
	// TailMaxChars bounds the whole note, tags included, in UTF-16 units
	// (the original's string length; never fewer than code points).
	TailMaxChars = 8000
	// TailMaxTerminal is how many of the most recently ended tasks the note
	// shows after the open ones.
	TailMaxTerminal = 3
	// tailReasonMaxChars cuts a reason or evidence inside the note.
	tailReasonMaxChars = 300
)

// Tags around the ledger note. Task text can never hold them: canonical
// text removes every <task-ledger…> tag.
const (
	TailOpenTag  = "<task-ledger>"
	TailCloseTag = "</task-ledger>"
)

// Tail renders the Session's ledger note for the tail of a model request,
// or "" when the Session has no open task (or its ledger cannot be read:
// the turn goes on without the note).
func (l *Ledger) Tail(ctx context.Context, sessionID string) string {
	list, _, err := l.List(ctx, sessionID)
	if err != nil {
		if ctx.Err() == nil {
			l.log.Warn("task ledger unreadable; model request without its task note", "session", sessionID, "err", err)
		}
		return ""
	}
	return RenderTail(list)
}

// RenderTail renders the note of a listed ledger (creation order, as List
// returns it): every open task (pending, in_progress, blocked) in order,
// then at most TailMaxTerminal tasks that ended most recently, newest
// first, one line each. The note is at most TailMaxChars long: the lines
// that do not fit are left out and counted on a last line. It is "" when no
// task is open.
func RenderTail(list []protocol.Task) string {
	var open, ended []protocol.Task
	for _, t := range list {
		if terminal(t.Status) {
			ended = append(ended, t)
		} else {
			open = append(open, t)
		}
	}
	if len(open) == 0 {
		return ""
	}
	sort.SliceStable(ended, func(i, j int) bool { return endedAt(ended[i]) > endedAt(ended[j]) })
	ended = ended[:min(len(ended), TailMaxTerminal)]

	head := TailOpenTag + "\nThe session's task ledger (update it with task_update as you work; task_list shows every task):\n"
	lines := make([]string, 0, len(open)+len(ended)+1)
	for _, t := range open {
		lines = append(lines, tailLine(t))
	}
	if len(ended) > 0 {
		lines = append(lines, "Recently ended:")
		for _, t := range ended {
			lines = append(lines, tailLine(t))
		}
	}
	var b strings.Builder
	b.WriteString(head)
	used := units(head) + units(TailCloseTag)
	for i, line := range lines {
		left := len(lines) - i
		omitted := "… " + strconv.Itoa(left) + " more lines left out (task_list shows them)\n"
		need := units(line) + 1
		if i < len(lines)-1 {
			// Room must stay for the omission line after this one.
			need += units("… " + strconv.Itoa(left-1) + " more lines left out (task_list shows them)\n")
		}
		if used+need > TailMaxChars {
			b.WriteString(omitted)
			break
		}
		b.WriteString(line)
		b.WriteByte('\n')
		used += units(line) + 1
	}
	b.WriteString(TailCloseTag)
	return b.String()
}

// tailLine is one task of the note: key, status, subject and the evidence
// of its status.
func tailLine(t protocol.Task) string {
	line := "- " + t.Key + " [" + string(t.Status) + "] " + t.Subject
	switch t.Status {
	case protocol.TaskBlocked:
		line += appendReason("blocked: ", t.BlockedReason)
	case protocol.TaskFailed:
		line += appendReason("failed: ", t.FailureReason)
	case protocol.TaskCompleted:
		line += appendReason("evidence: ", t.CompletionEvidence)
	}
	return line
}

func appendReason(label, s string) string {
	if s == "" {
		return ""
	}
	if utf8.RuneCountInString(s) > tailReasonMaxChars {
		s = string([]rune(s)[:tailReasonMaxChars-1]) + "…"
	}
	return " — " + label + s
}

func endedAt(t protocol.Task) protocol.TaskTime {
	if t.EndedAt != nil {
		return *t.EndedAt
	}
	return t.UpdatedAt
}

// units is the length of s in UTF-16 code units.
func units(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}
