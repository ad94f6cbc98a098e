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
	if k.String() != "ctrl+c" {
		m.quitAsked = false
	}
	if m.list.open {
		return m.listKey(k)
	}
	if m.help {
		switch k.String() {
		case "esc", "?", "q":
			m.help = false
		case "ctrl+c":
			m.help = false
			return m.ctrlC()
		}
		return nil
	}
	if m.offer != nil && m.prompt == nil && m.input.Value() == "" {
		if cmd, ok := m.offerKey(k); ok {
			return cmd
		}
	}
	switch k.String() {
	case "ctrl+c":
		return m.ctrlC()
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
	case "ctrl+o":
		m.expanded = !m.expanded
		for _, e := range m.entries {
			if e.kind == entryTool {
				e.touch()
			}
		}
		return nil
	case "pgup":
		m.vp.HalfPageUp()
		m.follow = m.vp.AtBottom()
		return nil
	case "pgdown":
		m.vp.HalfPageDown()
		m.follow = m.vp.AtBottom()
		return nil
	case "tab":
		if strings.HasPrefix(m.input.Value(), "/") {
			m.complete()
			return nil
		}
		m.followUp = !m.followUp
		return nil
	}
	if m.prompt != nil {
		return m.promptKey(k)
	}
	if k.String() == "?" && m.input.Value() == "" {
		m.help = true
		return nil
	}
	if k.Type == tea.KeyEnter && !k.Alt && !k.Paste {
		return m.submit()
	}
	m.input.Update(k)
	return nil
}

// ctrlC clears the input if it holds text; else stops the running turn;
// else asks before quitting, and quits on the second press.
func (m *model) ctrlC() tea.Cmd {
	switch {
	case m.input.Value() != "":
		m.input.Reset()
		return nil
	case m.stopping:
		return m.quit() // a second Ctrl-C leaves without waiting
	case m.turnActive():
		return m.stop()
	case m.quitAsked:
		return m.quit()
	}
	m.quitAsked = true
	m.setNotice(false, "press Ctrl-C again to quit")
	return nil
}

// submit sends the input box's text, or runs it as a slash command.
func (m *model) submit() tea.Cmd {
	text := m.input.Value()
	if strings.TrimSpace(text) == "" {
		return nil
	}
	if strings.HasPrefix(text, "/") && !strings.HasPrefix(text, "//") {
		m.input.hist.add(text)
		m.input.Reset()
		return m.slash(text)
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
	m.input.hist.add(text)
	m.input.Reset()
	m.notice, m.noticeErr = "", false
	if strings.HasPrefix(text, "//") {
		text = text[1:] // a message that starts with a slash
	}
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
