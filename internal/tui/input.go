package tui

import (
	"slices"
	"strings"

	"github.com/charmbracelet/bubbles/cursor"
	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textarea"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
)

// Bounds of the input box and its history.
const (
	// maxInputRows is the most rows the box grows to; longer text scrolls.
	maxInputRows = 8
	// maxInputLines bounds the lines of one message being written.
	maxInputLines = 2000
	// maxHistoryEntries bounds the messages remembered per session.
	maxHistoryEntries = 100
	// maxHistorySessions bounds the sessions whose history is kept.
	maxHistorySessions = 32
)

// editor is the message box: a bubbles textarea with Up/Down recalling the
// session's earlier messages. Enter is left to the model (send); Ctrl-J and
// Alt-Enter insert a newline; a paste arrives whole, newlines included.
type editor struct {
	ta   textarea.Model
	hist *history // the current session's; nil: none yet
}

func (l *look) newInput() editor {
	ta := textarea.New()
	ta.Prompt = "> "
	ta.SetPromptFunc(2, func(line int) string {
		if line == 0 {
			return "> "
		}
		return "  "
	})
	ta.Placeholder = "Message maka… (Enter sends, Ctrl-J newline, / commands, ? help)"
	ta.ShowLineNumbers = false
	ta.CharLimit = 0
	ta.MaxHeight = maxInputLines
	ta.MaxWidth = 0
	ta.KeyMap.InsertNewline = key.NewBinding(key.WithKeys("ctrl+j", "alt+enter"))
	// The terminal pastes (bracketed paste); no clipboard is read.
	ta.KeyMap.Paste = key.NewBinding(key.WithDisabled())
	ta.KeyMap.LineNext = key.NewBinding(key.WithKeys("down"))
	ta.KeyMap.LinePrevious = key.NewBinding(key.WithKeys("up"))
	ta.KeyMap.DeleteCharacterForward = key.NewBinding(key.WithKeys("delete", "ctrl+d"))
	focused, blurred := textarea.DefaultStyles()
	focused.CursorLine = l.r.NewStyle()
	focused.Placeholder = l.hint
	focused.Prompt = l.user
	focused.EndOfBuffer = l.r.NewStyle()
	focused.Base, focused.Text = l.r.NewStyle(), l.r.NewStyle()
	ta.FocusedStyle, ta.BlurredStyle = focused, blurred
	ta.Cursor.SetMode(cursor.CursorStatic)
	ta.Cursor.Style = l.r.NewStyle().Reverse(true)
	ta.Cursor.TextStyle = l.r.NewStyle()
	ta.Focus()
	ta.SetHeight(1)
	ta.SetWidth(defaultWidth)
	return editor{ta: ta}
}

// Value is the text in the box.
func (e *editor) Value() string { return e.ta.Value() }

// SetValue replaces the text and puts the cursor at its end.
func (e *editor) SetValue(s string) {
	e.edit(func() { e.ta.SetValue(s) })
}

// Reset empties the box and ends a history walk.
func (e *editor) Reset() {
	e.edit(e.ta.Reset)
	if e.hist != nil {
		e.hist.pos = len(e.hist.entries)
	}
}

// SetWidth sets the box width, prompt included.
func (e *editor) SetWidth(w int) {
	e.ta.SetWidth(max(w, 4))
	e.fit()
}

// Height is the rows the box takes.
func (e *editor) Height() int { return e.ta.Height() }

// edit applies a change with the box at its tallest, so that the view
// scrolls only when the text is taller than that, and then fits the box to
// the text.
func (e *editor) edit(change func()) {
	e.ta.SetHeight(maxInputRows)
	change()
	e.fit()
	e.ta, _ = e.ta.Update(nil) // keeps the cursor in view
}

// fit grows the box with its lines, up to maxInputRows.
func (e *editor) fit() {
	rows := 0
	w := max(e.ta.Width(), 1)
	for line := range strings.SplitSeq(e.ta.Value(), "\n") {
		rows += max(1, (lipgloss.Width(line)+w)/w)
	}
	e.ta.SetHeight(min(max(rows, 1), maxInputRows))
}

// Update applies an editing key; Up on the first line and Down on the last
// walk the history.
func (e *editor) Update(k tea.KeyMsg) {
	switch k.String() {
	case "up":
		if e.ta.Line() == 0 && e.ta.LineInfo().RowOffset == 0 && e.hist.back(e.ta.Value()) {
			e.SetValue(e.hist.current())
			return
		}
	case "down":
		if e.ta.Line() == e.ta.LineCount()-1 && e.hist.forward() {
			e.SetValue(e.hist.current())
			return
		}
	}
	switch {
	case k.Type == tea.KeyTab:
		return
	case k.Type == tea.KeySpace && len(k.Runes) == 0:
		k.Runes = []rune{' '}
	case k.Type == tea.KeyRunes && slices.Contains(k.Runes, '\r'):
		// A pasted CRLF or CR is one line break.
		k.Runes = []rune(strings.ReplaceAll(strings.ReplaceAll(string(k.Runes), "\r\n", "\n"), "\r", "\n"))
	}
	e.edit(func() { e.ta, _ = e.ta.Update(k) })
}

// View renders the box.
func (e *editor) View() string { return e.ta.View() }

// history is the messages sent in one session, oldest first, and a walk
// through them: pos is the entry shown (len(entries): the draft).
type history struct {
	entries []string
	pos     int
	draft   string
}

// add remembers a sent message and ends the walk.
func (h *history) add(s string) {
	if strings.TrimSpace(s) == "" {
		return
	}
	if n := len(h.entries); n == 0 || h.entries[n-1] != s {
		h.entries = append(h.entries, s)
		if len(h.entries) > maxHistoryEntries {
			h.entries = h.entries[len(h.entries)-maxHistoryEntries:]
		}
	}
	h.pos, h.draft = len(h.entries), ""
}

// back moves to the previous entry, keeping the draft first.
func (h *history) back(value string) bool {
	if h == nil || h.pos == 0 {
		return false
	}
	if h.pos == len(h.entries) {
		h.draft = value
	}
	h.pos--
	return true
}

// forward moves to the next entry (after the last: the draft).
func (h *history) forward() bool {
	if h == nil || h.pos >= len(h.entries) {
		return false
	}
	h.pos++
	return true
}

func (h *history) current() string {
	if h.pos >= len(h.entries) {
		return h.draft
	}
	return h.entries[h.pos]
}

// histories keeps one history per session, the most recent
// maxHistorySessions of them.
type histories struct {
	by    map[string]*history
	order []string // least recently used first
}

// of returns the history of a session ("": the session being started).
func (hs *histories) of(sessionID string) *history {
	if hs.by == nil {
		hs.by = map[string]*history{}
	}
	if h, ok := hs.by[sessionID]; ok {
		hs.touch(sessionID)
		return h
	}
	h := &history{}
	hs.by[sessionID] = h
	hs.order = append(hs.order, sessionID)
	for len(hs.order) > maxHistorySessions {
		delete(hs.by, hs.order[0])
		hs.order = hs.order[1:]
	}
	return h
}

// rename moves the history of the session being started to its id.
func (hs *histories) rename(from, to string) {
	h, ok := hs.by[from]
	if !ok {
		return
	}
	delete(hs.by, from)
	for i, id := range hs.order {
		if id == from {
			hs.order = append(hs.order[:i], hs.order[i+1:]...)
			break
		}
	}
	hs.by[to] = h
	hs.order = append(hs.order, to)
}

func (hs *histories) touch(id string) {
	for i, o := range hs.order {
		if o == id {
			hs.order = append(append(hs.order[:i:i], hs.order[i+1:]...), id)
			return
		}
	}
}

func truncateWidth(s string, w int) string {
	if lipgloss.Width(s) <= w {
		return s
	}
	rs := []rune(s)
	for len(rs) > 0 && lipgloss.Width(string(rs)) > w {
		rs = rs[:len(rs)-1]
	}
	return string(rs)
}
