package tui

import (
	tea "github.com/charmbracelet/bubbletea"

	"github.com/maka-agent/maka/protocol"
)

// sessionList is the session picker.
type sessionList struct {
	open     bool
	loading  bool
	sessions []protocol.SessionSummary
	cursor   int
	err      error
}

// openList shows the session picker and (re)loads the catalog.
func (m *model) openList() tea.Cmd {
	m.list.open = true
	m.list.loading = true
	m.list.err = nil
	return m.listSessions()
}

func (m *model) onSessions(msg sessionsMsg) tea.Cmd {
	l := &m.list
	l.loading = false
	l.err = msg.err
	if msg.sessions != nil || msg.err == nil {
		l.sessions = msg.sessions
	}
	l.cursor = 0
	if m.session != nil {
		for i, s := range l.sessions {
			if s.SessionID == m.session.SessionID {
				l.cursor = i
			}
		}
	}
	return nil
}

// listKey handles a key while the picker is shown: ↑/↓ (k/j) move, Enter
// opens, n starts a new session, r reloads, Esc closes, q or Ctrl-D quits.
func (m *model) listKey(k tea.KeyMsg) tea.Cmd {
	l := &m.list
	switch k.String() {
	case "up", "k":
		if l.cursor > 0 {
			l.cursor--
		}
	case "down", "j":
		if l.cursor < len(l.sessions)-1 {
			l.cursor++
		}
	case "home", "g":
		l.cursor = 0
	case "end", "G":
		l.cursor = max(len(l.sessions)-1, 0)
	case "r":
		return m.openList()
	case "n":
		l.open = false
		return m.newSession()
	case "enter":
		if l.cursor >= len(l.sessions) {
			return nil
		}
		l.open = false
		s := l.sessions[l.cursor]
		if m.session != nil && m.session.SessionID == s.SessionID {
			return nil
		}
		closeOld := m.detach()
		return tea.Batch(closeOld, m.attach(s, false))
	case "esc", "ctrl+s", "f2":
		l.open = false
	case "ctrl+c":
		if m.turnActive() {
			l.open = false
			return m.stop()
		}
		return m.quit()
	case "q", "ctrl+d":
		return m.quit()
	}
	return nil
}
