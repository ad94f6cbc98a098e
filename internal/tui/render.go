package tui

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/charmbracelet/lipgloss"

	"github.com/maka-agent/maka/protocol"
)

// Bounds of what one screen shows.
const (
	maxThinkingLines   = 8
	maxToolOutputLines = 6
	maxQueueLines      = 3
	maxCardLines       = 12
	// maxExpandedLines bounds a tool card's output when expanded (ctrl+o).
	maxExpandedLines = 200
)

// refresh lays the screen out and re-renders the transcript after an
// update.
func (m *model) refresh() {
	m.input.SetWidth(m.width)
	m.vp.Width = m.width
	m.queueText, m.cardText = m.queueView(), m.cardView()
	m.tasksText = m.tasksView()
	m.suggestText = m.suggestView()
	used := 2 + m.input.Height() + 1 // status, notice/hints, input and its rule
	if m.suggestText != "" {
		used += lipgloss.Height(m.suggestText)
	}
	if m.tasksText != "" {
		used += lipgloss.Height(m.tasksText)
	}
	if m.queueText != "" {
		used += lipgloss.Height(m.queueText)
	}
	if m.cardText != "" {
		used += lipgloss.Height(m.cardText)
	}
	m.vp.Height = max(m.height-used, 1)
	if content, changed := m.transcriptView(); changed {
		m.vp.SetContent(content)
	}
	if m.follow {
		m.vp.GotoBottom()
	}
}

// layout sizes the components before the first update.
func (m *model) layout() { m.refresh() }

// View renders the screen.
func (m *model) View() string {
	parts := []string{m.statusView()}
	switch {
	case m.list.open:
		parts = append(parts, m.listView(m.height-2))
	case m.help:
		parts = append(parts, m.helpView(m.height-2))
	default:
		parts = append(parts, m.vp.View())
		if m.tasksText != "" {
			parts = append(parts, m.tasksText)
		}
		if m.queueText != "" {
			parts = append(parts, m.queueText)
		}
		if m.cardText != "" {
			parts = append(parts, m.cardText)
		}
		if m.suggestText != "" {
			parts = append(parts, m.suggestText)
		}
		parts = append(parts, m.look.hint.Render(strings.Repeat("─", m.width)), m.input.View())
	}
	parts = append(parts, m.footerView())
	return strings.Join(parts, "\n")
}

// transcriptView renders every entry, and reports whether the result
// differs from the last one (entries are re-rendered only when changed).
func (m *model) transcriptView() (string, bool) {
	if len(m.entries) == 0 {
		var p string
		switch {
		case m.session == nil && m.creating:
			p = "  creating a session…"
		case m.session == nil:
			p = "  New session in " + m.opts.Workspace + ": type a message to start."
		case m.attaching || m.loading:
			p = "  loading…"
		default:
			p = "  (no messages yet)"
		}
		p = m.look.hint.Render(p)
		changed := p != m.joined || m.joinedOf != nil
		m.joined, m.joinedOf = p, nil
		return p, changed
	}
	same := m.joinedWidth == m.width && len(m.joinedOf) == len(m.entries)
	for i := 0; same && i < len(m.entries); i++ {
		same = m.entries[i] == m.joinedOf[i] && !m.entries[i].dirty
	}
	if same {
		return m.joined, false
	}
	var b strings.Builder
	for i, e := range m.entries {
		if i > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(m.renderEntry(e))
	}
	m.joined, m.joinedOf, m.joinedWidth = b.String(), slices.Clone(m.entries), m.width
	return m.joined, true
}

func (m *model) renderEntry(e *entry) string {
	w := m.width
	if !e.dirty && e.renderedWidth == w {
		return e.rendered
	}
	l := m.look
	var s string
	switch e.kind {
	case entryUser:
		s = indentLines(l.r.NewStyle().Width(max(w-2, 10)).Render(sanitize(e.text)), l.user.Render("› "), "  ")
	case entryAssistant:
		if e.live {
			s = l.wrap(e.text, w, "  ")
		} else {
			s = l.markdown(e.text, w)
		}
	case entryThinking:
		body := l.wrap(e.text, w, "  ")
		lines := strings.Split(body, "\n")
		if len(lines) > maxThinkingLines {
			lines = append([]string{"  …"}, lines[len(lines)-maxThinkingLines:]...)
		}
		s = l.thinking.Render("  ∴ thinking") + "\n" + l.thinking.Render(strings.Join(lines, "\n"))
	case entryTool:
		s = m.toolView(e.tool, w)
	case entryNote:
		s = m.renderNote(e, w)
	}
	e.rendered, e.renderedWidth, e.dirty = s, w, false
	return s
}

// toolView renders a tool card: name, argument summary, status and the
// tail of its output.
func (m *model) toolView(t *toolCard, w int) string {
	l := m.look
	head := l.toolName.Render("⚙ " + t.name)
	if t.args != "" {
		head += " " + l.toolArgs.Render(t.args)
	}
	var badge string
	switch t.status {
	case protocol.TranscriptToolCompleted:
		badge = l.toolOK.Render("✓ completed")
	case protocol.TranscriptToolErrored:
		badge = l.toolErr.Render("✗ errored")
	case toolRunning:
		badge = l.toolRun.Render("… running")
		if t.waiting {
			badge = l.toolRun.Render("? awaiting approval")
		}
	default:
		badge = l.dim.Render("? " + t.status)
	}
	inner := max(w-4, 10)
	lines := []string{l.r.NewStyle().MaxWidth(inner).Render(head + "  " + badge)}
	if t.progress != "" {
		lines = append(lines, l.dim.MaxWidth(inner).Render(firstLine(sanitize(t.progress))))
	}
	if out := strings.TrimRight(sanitize(t.output), "\n"); out != "" {
		ol := strings.Split(out, "\n")
		limit := maxToolOutputLines
		if m.expanded {
			limit = maxExpandedLines
		}
		if len(ol) > limit {
			hidden := len(ol) - limit
			ol = ol[hidden:]
			more := fmt.Sprintf("… %d earlier lines", hidden)
			if hidden == 1 {
				more = "… 1 earlier line"
			}
			if !m.expanded {
				more += " (ctrl+o expands)"
			}
			lines = append(lines, l.dim.Render(more))
		} else if t.truncated {
			lines = append(lines, l.dim.Render("… (earlier output not kept)"))
		}
		for _, o := range ol {
			lines = append(lines, l.dim.MaxWidth(inner).Render(o))
		}
	}
	return l.toolBox.Width(w - 2).Render(strings.Join(lines, "\n"))
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// statusView is the top line: the session, the model its turns use, the
// permission mode, the sandbox, the thinking effort, the workspace, the
// turn (a spinner and its time while it runs) and the last host notice.
func (m *model) statusView() string {
	parts := []string{"maka"}
	s := m.session
	if s != nil {
		name := s.Name
		if name == "" {
			name = short(s.SessionID)
		}
		parts = append(parts, truncateWidth(name, 32))
	} else {
		parts = append(parts, "new session")
	}
	if c := m.usedModel(); c.Slug != "" {
		parts = append(parts, truncateWidth(sanitize(c.String()), 64))
	} else {
		parts = append(parts, "model: host default")
	}
	mode := m.opts.PermissionMode
	if s != nil {
		mode = string(s.PermissionMode)
	}
	if mode != "" {
		parts = append(parts, mode)
	}
	if m.perms != nil {
		parts = append(parts, "sandbox "+m.perms.SandboxInForce())
		if m.perms.Thinking != "" {
			parts = append(parts, "thinking "+m.perms.Thinking)
		}
	} else if s == nil && m.nextThinking != "" {
		parts = append(parts, "thinking "+m.nextThinking)
	}
	ws := m.opts.Workspace
	if s != nil && s.Workspace.Path != "" {
		ws = s.Workspace.Path
	}
	if ws != "" {
		parts = append(parts, shortPath(ws))
	}
	var right []string
	rt := m.rootTurn()
	switch {
	case m.turnActive():
		state := "running"
		if rt != nil && !rt.Status.Terminal() && rt.Status != protocol.TurnRunning {
			state = string(rt.Status)
		}
		if m.stopping {
			state = "stopping"
		}
		t := m.spin.View() + " turn " + state
		if !m.runSince.IsZero() {
			t += " " + elapsed(int64(m.now().Sub(m.runSince).Seconds()))
		}
		if q := m.queueLen(); q > 0 {
			t += fmt.Sprintf(" · queue %d", q)
		}
		if m.followUp {
			t += " · follow-up"
		}
		right = append(right, t)
	case rt != nil:
		right = append(right, "turn "+string(rt.Status))
	}
	if u := usageView(m.usage); u != "" {
		right = append(right, u)
	}
	if m.hostNotice != "" {
		right = append(right, truncateWidth(m.hostNotice, max(m.width/2, 20)))
	}
	// The turn and the notice keep their place at the right; the rest is
	// cut to fit.
	r := strings.Join(right, " · ")
	if r != "" {
		r = " " + r + " "
	}
	l := truncateWidth(" "+strings.Join(parts, " · "), max(m.width-lipgloss.Width(r)-1, 0))
	gap := max(m.width-lipgloss.Width(l)-lipgloss.Width(r), 0)
	line := truncateWidth(l+strings.Repeat(" ", gap)+r, m.width)
	return m.look.status.Width(m.width).Render(line)
}

// usageView is the status line's token usage of the latest turn, "12.3k
// in · 845 out", and what the conversation holds against the model's
// context window, "ctx 9.1k/128k"; "" before any usage is known.
func usageView(n protocol.SessionNotice) string {
	var parts []string
	if n.HasUsage {
		parts = append(parts, compactTokens(n.Usage.InputTokens)+" in", compactTokens(n.Usage.OutputTokens)+" out")
	}
	if n.ContextTokens > 0 && n.ContextWindow > 0 {
		parts = append(parts, "ctx "+compactTokens(n.ContextTokens)+"/"+compactTokens(n.ContextWindow))
	}
	return strings.Join(parts, " · ")
}

// compactTokens writes a token count as 845, 12.3k, 128k or 1.2M.
func compactTokens(n int64) string {
	switch {
	case n < 1000:
		return strconv.FormatInt(n, 10)
	case n < 1_000_000:
		return strings.TrimSuffix(strconv.FormatFloat(float64(n)/1e3, 'f', 1, 64), ".0") + "k"
	}
	return strings.TrimSuffix(strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64), ".0") + "M"
}

// shortPath shortens a workspace path: the home directory as ~, and only
// the last two directories of a deep path.
func shortPath(p string) string {
	if home, err := os.UserHomeDir(); err == nil && home != "/" && (p == home || strings.HasPrefix(p, home+"/")) {
		p = "~" + p[len(home):]
	}
	parts := strings.Split(p, "/")
	if len(parts) > 3 {
		p = "…/" + strings.Join(parts[len(parts)-2:], "/")
	}
	return p
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func modelTarget(t protocol.ModelTarget) string {
	if t.Kind == protocol.ModelTargetExplicit {
		return t.ConnectionSlug + "/" + t.Model
	}
	return "default"
}

func (m *model) queueLen() int {
	if m.snap == nil {
		return 0
	}
	return len(m.snap.Queue.Steering) + len(m.snap.Queue.Followup)
}

// queueView lists the queued steering and follow-up messages.
func (m *model) queueView() string {
	if m.snap == nil || m.queueLen() == 0 {
		return ""
	}
	var lines []string
	add := func(label string, e protocol.MessageQueueEntrySnapshot) {
		l := label + firstLine(sanitize(e.Content.Text))
		if e.State == protocol.MessageInFlight {
			l += " (delivering)"
		}
		lines = append(lines, m.look.queue.MaxWidth(m.width).Render(l))
	}
	for _, e := range m.snap.Queue.Steering {
		add("  ↳ steer: ", e)
	}
	for _, e := range m.snap.Queue.Followup {
		add("  ⏭ next turn: ", e)
	}
	if len(lines) > maxQueueLines {
		more := len(lines) - maxQueueLines
		lines = append(lines[:maxQueueLines], m.look.queue.Render(fmt.Sprintf("  … %d more", more)))
	}
	return strings.Join(lines, "\n")
}

// cardView renders the pending prompt as a card.
func (m *model) cardView() string {
	if m.prompt == nil {
		if m.offer != nil {
			return m.offerView()
		}
		return ""
	}
	title, lines, keys := m.promptLines()
	inner := max(m.width-4, 10)
	styled := make([]string, 0, len(lines))
	for _, l := range strings.Split(sanitize(strings.Join(lines, "\n")), "\n") {
		switch {
		case strings.HasPrefix(l, "+++ ") || strings.HasPrefix(l, "--- "):
			l = m.look.toolName.Render(l)
		case strings.HasPrefix(l, "+"):
			l = m.look.toolOK.Render(l)
		case strings.HasPrefix(l, "-"):
			l = m.look.toolErr.Render(l)
		case strings.HasPrefix(l, "@@"):
			l = m.look.info.Render(l)
		}
		styled = append(styled, l)
	}
	body := m.look.r.NewStyle().Width(inner).Render(strings.Join(styled, "\n"))
	bl := strings.Split(body, "\n")
	if limit := max(maxCardLines, m.height-12); len(bl) > limit {
		bl = append(bl[:limit-1], "…")
	}
	content := m.look.cardTitle.Render(title) + "\n" + strings.Join(bl, "\n") + "\n" + m.look.info.Render(keys)
	return m.look.card.Width(m.width - 2).Render(content)
}

// footerView is the notice, or the key hints of the current state.
func (m *model) footerView() string {
	if m.notice != "" {
		st := m.look.info
		if m.noticeErr {
			st = m.look.errText
		}
		return st.MaxWidth(m.width).Render(" " + firstLine(m.notice))
	}
	var h string
	switch {
	case m.list.open:
		h = "↑/↓ move · / filter · enter open · n new · r reload · esc back · q quit"
	case m.prompt != nil:
		h = "answer the prompt · esc stop the turn · ctrl+d quit"
	case m.turnActive():
		mode := "steer"
		if m.followUp {
			mode = "follow-up"
		}
		h = "enter " + mode + " · tab steer/follow-up · esc stop · ctrl+o tool output · ? help"
	case m.help:
		h = "esc closes this help"
	default:
		h = "enter send · ctrl+j newline · / commands · ctrl+o tool output · ? help"
	}
	return m.look.hint.MaxWidth(m.width).Render(" " + h)
}

// padLines makes s exactly height lines.
func padLines(s string, height int) string {
	lines := strings.Split(s, "\n")
	for len(lines) < height {
		lines = append(lines, "")
	}
	return strings.Join(lines[:height], "\n")
}

func lipglossNormalLeft() lipgloss.Border { return lipgloss.NormalBorder() }
