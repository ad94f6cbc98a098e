package tui

import (
	"io"
	"regexp"
	"strings"

	"github.com/charmbracelet/glamour"
	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
)

// look holds the styles of the interface, bound to the output's colour
// profile (no colours when it is not a terminal), and the markdown
// renderer.
type look struct {
	r       *lipgloss.Renderer
	mdStyle string
	md      *glamour.TermRenderer
	mdWidth int

	status, hint, errText, info   lipgloss.Style
	user, thinking, plain         lipgloss.Style
	toolBox, toolName, toolArgs   lipgloss.Style
	toolOK, toolErr, toolRun, dim lipgloss.Style
	card, cardTitle, queue        lipgloss.Style
	listSel, listItem, listTitle  lipgloss.Style
}

func newLook(out io.Writer, mdStyle string) *look {
	r := lipgloss.NewRenderer(out)
	switch {
	case r.ColorProfile() == termenv.Ascii:
		// Without colours and attributes the plain style keeps the text
		// free of escape sequences.
		mdStyle = "notty"
	case mdStyle == "":
		mdStyle = "dark"
	}
	l := &look{r: r, mdStyle: mdStyle}
	l.status = r.NewStyle().Reverse(true)
	l.hint = r.NewStyle().Foreground(lipgloss.Color("8"))
	l.errText = r.NewStyle().Foreground(lipgloss.Color("9"))
	l.info = r.NewStyle().Foreground(lipgloss.Color("6"))
	l.user = r.NewStyle().Bold(true).Foreground(lipgloss.Color("12"))
	l.thinking = r.NewStyle().Faint(true).Italic(true)
	l.plain = r.NewStyle()
	l.toolBox = r.NewStyle().Border(lipgloss.RoundedBorder()).BorderForeground(lipgloss.Color("8")).Padding(0, 1)
	l.toolName = r.NewStyle().Bold(true)
	l.toolArgs = r.NewStyle().Foreground(lipgloss.Color("7"))
	l.toolOK = r.NewStyle().Foreground(lipgloss.Color("2"))
	l.toolErr = r.NewStyle().Foreground(lipgloss.Color("1"))
	l.toolRun = r.NewStyle().Foreground(lipgloss.Color("3"))
	l.dim = r.NewStyle().Faint(true)
	l.card = r.NewStyle().Border(lipgloss.RoundedBorder()).BorderForeground(lipgloss.Color("11")).Padding(0, 1)
	l.cardTitle = r.NewStyle().Bold(true).Foreground(lipgloss.Color("11"))
	l.queue = r.NewStyle().Foreground(lipgloss.Color("6"))
	l.listSel = r.NewStyle().Reverse(true)
	l.listItem = r.NewStyle()
	l.listTitle = r.NewStyle().Bold(true)
	return l
}

// markdown renders assistant text for the given width; the plain text is
// returned if rendering fails.
func (l *look) markdown(text string, width int) string {
	if l.md == nil || l.mdWidth != width {
		md, err := glamour.NewTermRenderer(
			glamour.WithStandardStyle(l.mdStyle),
			glamour.WithColorProfile(l.r.ColorProfile()),
			glamour.WithWordWrap(max(width-4, 10)),
		)
		if err != nil {
			return l.wrap(text, width, "  ")
		}
		l.md, l.mdWidth = md, width
	}
	out, err := l.md.Render(text)
	if err != nil {
		return l.wrap(text, width, "  ")
	}
	return strings.Trim(out, "\n")
}

// wrap soft-wraps text to width, every line starting with indent.
func (l *look) wrap(text string, width int, indent string) string {
	w := max(width-len(indent), 10)
	body := l.r.NewStyle().Width(w).Render(sanitize(text))
	return indentLines(body, indent, indent)
}

func indentLines(s, first, rest string) string {
	lines := strings.Split(s, "\n")
	for i := range lines {
		if i == 0 {
			lines[i] = first + lines[i]
		} else {
			lines[i] = rest + lines[i]
		}
	}
	return strings.Join(lines, "\n")
}

var escapeSequence = regexp.MustCompile(`\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b.`)

// sanitize makes text from the host safe to draw: escape sequences are
// removed, carriage-return overwrites keep their last segment, tabs become
// spaces and other control characters are dropped.
func sanitize(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 && r != '\n' || r == 0x7f }) {
		return s
	}
	s = escapeSequence.ReplaceAllString(s, "")
	lines := strings.Split(s, "\n")
	for i, line := range lines {
		if j := strings.LastIndexByte(strings.TrimRight(line, "\r"), '\r'); j >= 0 {
			line = line[j+1:]
		}
		line = strings.ReplaceAll(line, "\t", "    ")
		lines[i] = strings.Map(func(r rune) rune {
			if r < 0x20 || r == 0x7f {
				return -1
			}
			return r
		}, line)
	}
	return strings.Join(lines, "\n")
}
