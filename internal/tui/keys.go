package tui

import (
	"strings"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/maka-agent/maka/protocol"
)

// handleKey applies a key press. Global keys come first; while a prompt
// is shown it takes the printable keys (so that typing never answers it by
// accident); the rest edits the input box.
func (m *model) handleKey(k tea.KeyMsg) tea.Cmd {
	if !m.noticeErr {
		m.notice = ""
	}
	if m.list.open {
		return m.listKey(k)
	}
	switch k.String() {
	case "ctrl+c":
		switch {
		case m.turnActive() && !m.stopping:
			return m.stop()
		case m.stopping:
			return m.quit() // a second Ctrl-C leaves without waiting
		case m.input.Value() != "":
			m.input.Reset()
			return nil
		}
		return m.quit()
	case "esc":
		m.notice, m.noticeErr = "", false
		return m.stop()
	case "ctrl+d":
		if m.input.Value() == "" {
			return m.quit()
		}
	case "ctrl+s", "f2":
		return m.openList()
	case "ctrl+n":
		return m.newSession()
	case "pgup":
		m.vp.HalfPageUp()
		m.follow = m.vp.AtBottom()
		return nil
	case "pgdown":
		m.vp.HalfPageDown()
		m.follow = m.vp.AtBottom()
		return nil
	case "tab":
		m.followUp = !m.followUp
		return nil
	}
	if m.prompt != nil {
		return m.promptKey(k)
	}
	if k.Type == tea.KeyEnter && !k.Alt && !k.Paste {
		return m.submit()
	}
	m.input.Update(k)
	return nil
}

// submit sends the input box's text.
func (m *model) submit() tea.Cmd {
	text := m.input.Value()
	if strings.TrimSpace(text) == "" {
		return nil
	}
	switch {
	case m.creating || m.sending:
		m.setNotice(false, "still sending the previous message…")
		return nil
	case m.session != nil && m.stream == nil:
		m.setNotice(false, "connecting to the session…")
		if !m.attaching {
			return m.attach(*m.session, true)
		}
		return nil
	case len(text) > protocol.MessageTextMaxBytes:
		m.setNotice(true, "the message is longer than %d bytes", protocol.MessageTextMaxBytes)
		return nil
	}
	m.input.Reset()
	m.notice, m.noticeErr = "", false
	return m.send(text)
}

// newSession leaves the current session; the next message creates one.
func (m *model) newSession() tea.Cmd {
	if m.session == nil {
		return nil
	}
	cmd := m.detach()
	m.setNotice(false, "new session: type a message to start it")
	return cmd
}
