package tui

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/list"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/maka-agent/maka/protocol"
)

// sessionList is the session picker: a bubbles list of the catalog, which
// filters with /.
type sessionList struct {
	open     bool
	loading  bool
	sessions []protocol.SessionSummary
	err      error
	l        list.Model
	ready    bool
}

// sessionItem is one session of the picker.
type sessionItem struct {
	s       protocol.SessionSummary
	current bool
}

func (i sessionItem) Title() string {
	name := i.s.Name
	if name == "" {
		name = short(i.s.SessionID)
	}
	if i.current {
		name = "• " + name
	}
	return sanitize(name)
}

func (i sessionItem) Description() string {
	when := time.UnixMilli(i.s.LastUsedAt).Format("2006-01-02 15:04")
	return sanitize(fmt.Sprintf("%s · %s · %s · %s", i.s.Status, modelTarget(i.s.ModelTarget), when, filepath.Base(i.s.Workspace.Path)))
}

func (i sessionItem) FilterValue() string { return i.s.Name + " " + i.s.SessionID }

// newSessionList makes the list component, styled for the output.
func (m *model) newSessionList() list.Model {
	d := list.NewDefaultDelegate()
	d.Styles.NormalTitle = m.look.r.NewStyle().Padding(0, 0, 0, 2)
	d.Styles.NormalDesc = m.look.hint.Padding(0, 0, 0, 2)
	d.Styles.SelectedTitle = m.look.listSel.Padding(0, 0, 0, 1).Border(lipglossNormalLeft(), false, false, false, true)
	d.Styles.SelectedDesc = m.look.info.Padding(0, 0, 0, 1).Border(lipglossNormalLeft(), false, false, false, true)
	d.Styles.DimmedTitle = m.look.hint.Padding(0, 0, 0, 2)
	d.Styles.DimmedDesc = m.look.hint.Padding(0, 0, 0, 2)
	l := list.New(nil, d, m.width, max(m.height-2, 4))
	l.Title = "Sessions"
	if m.opts.RootPath != "" {
		l.Title += " — " + m.opts.RootPath
	}
	l.Styles.Title = m.look.listTitle
	l.SetStatusBarItemName("session", "sessions")
	l.KeyMap.Quit = key.NewBinding(key.WithDisabled())
	l.KeyMap.ForceQuit = key.NewBinding(key.WithDisabled())
	l.AdditionalShortHelpKeys = func() []key.Binding {
		return []key.Binding{
			key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "open")),
			key.NewBinding(key.WithKeys("n"), key.WithHelp("n", "new")),
			key.NewBinding(key.WithKeys("r"), key.WithHelp("r", "reload")),
			key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "back")),
		}
	}
	return l
}

// openList shows the session picker and (re)loads the catalog.
func (m *model) openList() tea.Cmd {
	if !m.list.ready {
		m.list.l, m.list.ready = m.newSessionList(), true
	}
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
	items := make([]list.Item, len(l.sessions))
	cursor := 0
	for i, s := range l.sessions {
		cur := m.session != nil && s.SessionID == m.session.SessionID
		if cur {
			cursor = i
		}
		items[i] = sessionItem{s: s, current: cur}
	}
	cmd := l.l.SetItems(items)
	l.l.Select(cursor)
	return cmd
}

// listKey handles a key while the picker is shown: the list's keys move
// and filter (/); Enter opens, n starts a new session, r reloads, Esc
// closes, q or Ctrl-D quits.
func (m *model) listKey(k tea.KeyMsg) tea.Cmd {
	l := &m.list
	if l.l.SettingFilter() {
		if k.String() == "ctrl+c" {
			l.l.ResetFilter()
			return nil
		}
		var cmd tea.Cmd
		l.l, cmd = l.l.Update(k)
		return cmd
	}
	switch k.String() {
	case "r":
		return m.openList()
	case "n":
		l.open = false
		return m.newSession()
	case "enter":
		it, ok := l.l.SelectedItem().(sessionItem)
		if !ok {
			return nil
		}
		l.open = false
		if m.session != nil && m.session.SessionID == it.s.SessionID {
			return nil
		}
		closeOld := m.detach()
		return tea.Batch(closeOld, m.attach(it.s, false))
	case "esc":
		if l.l.FilterState() != list.Unfiltered {
			l.l.ResetFilter()
			return nil
		}
		l.open = false
		return nil
	case "ctrl+s", "f2":
		l.open = false
		return nil
	case "ctrl+c":
		if m.turnActive() {
			l.open = false
			return m.stop()
		}
		return m.quit()
	case "q", "ctrl+d":
		return m.quit()
	}
	var cmd tea.Cmd
	l.l, cmd = l.l.Update(k)
	return cmd
}

// listView renders the session picker in height lines.
func (m *model) listView(height int) string {
	l := &m.list
	l.l.SetSize(m.width, max(height, 4))
	switch {
	case l.loading && len(l.sessions) == 0:
		return padLines(m.look.listTitle.Render(" "+l.l.Title)+"\n"+m.look.hint.Render("  loading…"), height)
	case l.err != nil && len(l.sessions) == 0:
		return padLines(m.look.listTitle.Render(" "+l.l.Title)+"\n"+m.look.errText.Render("  "+l.err.Error()), height)
	case len(l.sessions) == 0:
		return padLines(m.look.listTitle.Render(" "+l.l.Title)+"\n"+m.look.hint.Render("  no sessions yet: press n to start one"), height)
	}
	return padLines(l.l.View(), height)
}
