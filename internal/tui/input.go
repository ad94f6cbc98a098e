package tui

import (
	"strings"
	"unicode"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
)

// editor is the multi-line message box. Enter is left to the model
// (send); Ctrl-J and Alt-Enter insert a newline. Emacs-style editing keys
// move and delete; the text soft-wraps and the view scrolls to the cursor.
type editor struct {
	value  []rune
	pos    int // cursor, a rune index into value
	width  int
	height int

	prompt      string
	placeholder string
	promptStyle lipgloss.Style
	placeStyle  lipgloss.Style
	cursorStyle lipgloss.Style
}

func (l *look) newInput() editor {
	return editor{
		height:      inputHeight,
		width:       defaultWidth,
		prompt:      "> ",
		placeholder: "Message maka… (Enter sends, Ctrl-J newline)",
		promptStyle: l.user,
		placeStyle:  l.hint,
		cursorStyle: l.r.NewStyle().Reverse(true),
	}
}

// Value is the text in the box.
func (e *editor) Value() string { return string(e.value) }

// SetValue replaces the text and puts the cursor at its end.
func (e *editor) SetValue(s string) {
	e.value = []rune(s)
	e.pos = len(e.value)
}

// Reset empties the box.
func (e *editor) Reset() { e.value, e.pos = nil, 0 }

// SetWidth sets the box width, prompt included.
func (e *editor) SetWidth(w int) { e.width = w }

func (e *editor) insert(rs []rune) {
	clean := make([]rune, 0, len(rs))
	for i, r := range rs {
		switch {
		case r == '\r':
			if i+1 < len(rs) && rs[i+1] == '\n' {
				continue
			}
			clean = append(clean, '\n')
		case r == '\t':
			clean = append(clean, ' ', ' ', ' ', ' ')
		case r == '\n' || !unicode.IsControl(r):
			clean = append(clean, r)
		}
	}
	v := make([]rune, 0, len(e.value)+len(clean))
	v = append(append(append(v, e.value[:e.pos]...), clean...), e.value[e.pos:]...)
	e.value = v
	e.pos += len(clean)
}

func (e *editor) deleteRange(from, to int) {
	if from >= to {
		return
	}
	e.value = append(e.value[:from:from], e.value[to:]...)
	e.pos = from
}

func (e *editor) lineStart(p int) int {
	for p > 0 && e.value[p-1] != '\n' {
		p--
	}
	return p
}

func (e *editor) lineEnd(p int) int {
	for p < len(e.value) && e.value[p] != '\n' {
		p++
	}
	return p
}

func (e *editor) wordLeft(p int) int {
	for p > 0 && unicode.IsSpace(e.value[p-1]) {
		p--
	}
	for p > 0 && !unicode.IsSpace(e.value[p-1]) {
		p--
	}
	return p
}

func (e *editor) wordRight(p int) int {
	for p < len(e.value) && unicode.IsSpace(e.value[p]) {
		p++
	}
	for p < len(e.value) && !unicode.IsSpace(e.value[p]) {
		p++
	}
	return p
}

// vertical moves the cursor to the same column of the previous (dir -1)
// or next (dir 1) line.
func (e *editor) vertical(dir int) {
	start := e.lineStart(e.pos)
	col := e.pos - start
	if dir < 0 {
		if start == 0 {
			e.pos = 0
			return
		}
		prev := e.lineStart(start - 1)
		e.pos = min(prev+col, start-1)
		return
	}
	end := e.lineEnd(e.pos)
	if end == len(e.value) {
		e.pos = end
		return
	}
	next := end + 1
	e.pos = min(next+col, e.lineEnd(next))
}

// Update applies an editing key.
func (e *editor) Update(k tea.KeyMsg) {
	switch k.String() {
	case "ctrl+j", "alt+enter":
		e.insert([]rune{'\n'})
	case "backspace", "ctrl+h":
		if e.pos > 0 {
			e.deleteRange(e.pos-1, e.pos)
		}
	case "delete", "ctrl+d":
		if e.pos < len(e.value) {
			e.deleteRange(e.pos, e.pos+1)
		}
	case "left", "ctrl+b":
		e.pos = max(e.pos-1, 0)
	case "right", "ctrl+f":
		e.pos = min(e.pos+1, len(e.value))
	case "alt+left", "alt+b", "ctrl+left":
		e.pos = e.wordLeft(e.pos)
	case "alt+right", "alt+f", "ctrl+right":
		e.pos = e.wordRight(e.pos)
	case "home", "ctrl+a":
		e.pos = e.lineStart(e.pos)
	case "end", "ctrl+e":
		e.pos = e.lineEnd(e.pos)
	case "up", "ctrl+p":
		e.vertical(-1)
	case "down":
		e.vertical(1)
	case "ctrl+u":
		e.deleteRange(e.lineStart(e.pos), e.pos)
	case "ctrl+k":
		end := e.lineEnd(e.pos)
		if end == e.pos && end < len(e.value) {
			end++
		}
		e.deleteRange(e.pos, end)
	case "ctrl+w", "alt+backspace":
		e.deleteRange(e.wordLeft(e.pos), e.pos)
	default:
		switch k.Type {
		case tea.KeyRunes:
			e.insert(k.Runes)
		case tea.KeySpace:
			e.insert([]rune{' '})
		}
	}
}

// View renders the visible lines of the box, scrolled to the cursor.
func (e *editor) View() string {
	pw := lipgloss.Width(e.prompt)
	w := max(e.width-pw-1, 1)
	var lines []string
	if len(e.value) == 0 {
		lines = []string{e.cursorStyle.Render(" ") + e.placeStyle.Render(truncateWidth(e.placeholder, w-1))}
	} else {
		var cur int
		lines, cur = e.wrap(w)
		first := max(cur-e.height+1, 0)
		lines = lines[first:min(first+e.height, len(lines))]
	}
	out := make([]string, e.height)
	for i := range out {
		p := strings.Repeat(" ", pw)
		if i == 0 {
			p = e.promptStyle.Render(e.prompt)
		}
		if i < len(lines) {
			out[i] = p + lines[i]
		} else {
			out[i] = p
		}
	}
	return strings.Join(out, "\n")
}

// wrap cuts the value into visual lines of at most w columns, drawing the
// cursor, and returns the index of the line holding it.
func (e *editor) wrap(w int) ([]string, int) {
	var lines []string
	var b strings.Builder
	col, cur := 0, 0
	flush := func() {
		lines = append(lines, b.String())
		b.Reset()
		col = 0
	}
	for i := 0; i <= len(e.value); i++ {
		atCursor := i == e.pos
		if i == len(e.value) || e.value[i] == '\n' {
			if atCursor {
				if col+1 > w {
					flush()
				}
				cur = len(lines)
				b.WriteString(e.cursorStyle.Render(" "))
			}
			flush()
			continue
		}
		r := e.value[i]
		rw := max(lipgloss.Width(string(r)), 1)
		if col+rw > w {
			flush()
		}
		if atCursor {
			cur = len(lines)
			b.WriteString(e.cursorStyle.Render(string(r)))
		} else {
			b.WriteRune(r)
		}
		col += rw
	}
	return lines, cur
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
