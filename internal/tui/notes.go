package tui

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/protocol"
)

// callHint says what to do about a failed host call, when something can
// be done.
func callHint(err error) string {
	switch {
	case client.IsCode(err, protocol.ErrSessionBusy):
		return "the session is busy with a turn; wait for it to end or stop it (Esc)"
	case client.IsCode(err, protocol.ErrNotFound):
		return "it no longer exists; /sessions lists the sessions"
	case client.IsCode(err, protocol.ErrHostDraining), client.IsCode(err, protocol.ErrHostNotReady):
		return "the runtime host is stopping or starting; try again in a moment"
	case errors.Is(err, context.DeadlineExceeded):
		return "the runtime host did not answer in time; see 'maka host status'"
	}
	return ""
}

// maxNotes bounds the notes (errors and notices) a session view keeps.
const maxNotes = 64

// note appends a note to the transcript: an error (with what to do next)
// or an information line. Notes stay where they were written until the
// session view changes; transcript reloads keep them.
func (m *model) note(isErr bool, text, hint string) {
	after := ""
	if n := len(m.entries); n > 0 {
		last := m.entries[n-1]
		if last.kind == entryNote && last.text == text && last.isErr == isErr {
			return // the same notice twice (an answer and its frame)
		}
		after = last.key()
	}
	m.entries = append(m.entries, &entry{
		kind: entryNote, id: uuid.NewString(), text: text, hint: hint, isErr: isErr, after: after, dirty: true,
	})
	m.follow = true
	var notes []int
	for i, e := range m.entries {
		if e.kind == entryNote {
			notes = append(notes, i)
		}
	}
	if len(notes) > maxNotes {
		i := notes[0]
		m.entries = append(m.entries[:i], m.entries[i+1:]...)
	}
}

// failureHint says what to do about a failed turn, by failure class.
func (m *model) failureHint(class string) string {
	slug := "SLUG"
	if c := m.usedModel(); c.Slug != "" {
		slug = c.Slug
	}
	switch class {
	case "model_unavailable":
		return "the model could not be used; check 'maka connection list' (and /model to choose another for a new session)"
	case "auth":
		return "the provider rejected the credentials; store a valid key with 'maka connection set-key " + slug + "'"
	case "rate_limit":
		return "the provider is rate limiting requests; try again later"
	case "provider_billing":
		return "the provider reports a billing or quota problem with the account"
	case "network", "timeout", "provider_unavailable":
		return "the provider could not be reached; check the connection's base URL ('maka connection list') and the network"
	case "context_overflow":
		return "the conversation no longer fits the model's context; /compact it or start a /new session"
	case "step_limit":
		return "the turn reached its step limit; send a message to continue"
	case "content_filter":
		return "the provider's content filter stopped the answer"
	case "app_restarted":
		return "the runtime host restarted during the turn; send the message again"
	case "runtime_error":
		return "the host could not record the turn; see 'maka host status' and the host log"
	}
	if m.session != nil {
		return "see 'maka sessions show " + m.session.SessionID + "'"
	}
	return ""
}

// renderNote renders a note entry.
func (m *model) renderNote(e *entry, w int) string {
	st, mark := m.look.info, "ℹ "
	if e.isErr {
		st, mark = m.look.errText, "✗ "
	}
	body := m.look.r.NewStyle().Width(max(w-4, 10)).Render(sanitize(e.text))
	s := st.Render(indentLines(body, "  "+mark, "    "))
	if e.hint != "" {
		h := m.look.r.NewStyle().Width(max(w-6, 10)).Render(sanitize(e.hint))
		s += "\n" + m.look.hint.Render(indentLines(h, "    → ", "      "))
	}
	return s
}

// sessionName derives a session's name from its first message: its first
// line, whitespace collapsed, at most 80 characters.
func sessionName(text string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(sanitize(text)), "\n")
	line = strings.Join(strings.Fields(line), " ")
	if rs := []rune(line); len(rs) > 80 {
		line = strings.TrimSpace(string(rs[:79])) + "…"
	}
	return line
}

// elapsed formats a running turn's duration.
func elapsed(sec int64) string {
	if sec < 60 {
		return fmt.Sprintf("%ds", sec)
	}
	return fmt.Sprintf("%dm%02ds", sec/60, sec%60)
}
