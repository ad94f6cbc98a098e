package tui

import (
	"slices"
	"strings"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/maka-agent/maka/protocol"
)

// slashCommand is one command of the input box.
type slashCommand struct {
	name, args, help string
}

// slashCommands are the commands, in the order help lists them.
var slashCommands = []slashCommand{
	{"/help", "", "show the keys and commands"},
	{"/new", "", "start a new session (with the next message)"},
	{"/sessions", "", "list the sessions and open one"},
	{"/mode", "MODE", "set the permission mode: explore, ask, execute or bypass"},
	{"/model", "[CONNECTION/MODEL]", "list the models, or choose the model of new sessions"},
	{"/thinking", "LEVEL", "set the reasoning effort: off, low, medium or high"},
	{"/compact", "", "summarise the older conversation to free context"},
	{"/quit", "", "leave maka (the session stays)"},
}

// helpKeys are the keys help lists.
var helpKeys = [][2]string{
	{"enter", "send the message (while a turn runs: steer it, or queue with tab)"},
	{"ctrl+j / alt+enter", "new line"},
	{"↑ / ↓", "earlier messages of this session (on the first / last line)"},
	{"tab", "complete a /command; while a turn runs: steer or follow-up"},
	{"esc", "stop the running turn; close this help"},
	{"ctrl+c", "clear the input; else stop the turn; else quit (press twice)"},
	{"ctrl+o", "expand or collapse tool output"},
	{"ctrl+s / ctrl+n", "sessions / new session"},
	{"pgup / pgdn", "scroll the transcript"},
	{"y / n / a", "answer a permission prompt: allow, deny, allow for the turn"},
	{"ctrl+d", "quit (on an empty input)"},
	{"//text", "send a message that starts with a slash"},
}

// slash runs a slash command.
func (m *model) slash(text string) tea.Cmd {
	fields := strings.Fields(text)
	name, args := fields[0], fields[1:]
	arg := strings.Join(args, " ")
	switch name {
	case "/help", "/?":
		m.help = true
	case "/new":
		if m.session == nil {
			m.setNotice(false, "this is a new session: type a message to start it")
			return nil
		}
		return m.newSession()
	case "/sessions":
		return m.openList()
	case "/quit", "/exit":
		return m.quit()
	case "/mode":
		return m.setMode(arg)
	case "/thinking":
		return m.setThinking(arg)
	case "/model":
		return m.chooseModel(arg)
	case "/compact":
		switch {
		case m.session == nil:
			m.setNotice(true, "there is nothing to compact yet")
		case m.turnActive():
			m.setNotice(true, "a turn is running: compact once it has ended")
		case m.compacting:
			m.setNotice(false, "already compacting…")
		default:
			m.compacting = true
			m.setNotice(false, "compacting the conversation…")
			return m.compact(m.session.SessionID)
		}
	default:
		m.setNotice(true, "unknown command %s (/help lists them)", name)
	}
	return nil
}

func (m *model) setMode(arg string) tea.Cmd {
	mode := protocol.PermissionMode(arg)
	switch mode {
	case protocol.PermissionModeExplore, protocol.PermissionModeAsk, protocol.PermissionModeExecute, protocol.PermissionModeBypass:
	default:
		m.setNotice(true, "/mode takes explore, ask, execute or bypass")
		return nil
	}
	if m.session == nil {
		m.opts.PermissionMode = string(mode)
		m.note(false, "permission mode of the new session: "+arg, "")
		return nil
	}
	return m.setPermissions(protocol.SessionPermissionsSetInput{SessionID: m.session.SessionID, PermissionMode: mode})
}

func (m *model) setThinking(arg string) tea.Cmd {
	if !slices.Contains(protocol.SessionThinkingLevels, arg) {
		m.setNotice(true, "/thinking takes off, low, medium or high")
		return nil
	}
	if m.session == nil {
		m.nextThinking = arg
		m.note(false, "thinking of the new session: "+arg, "")
		return nil
	}
	return m.setPermissions(protocol.SessionPermissionsSetInput{SessionID: m.session.SessionID, Thinking: arg})
}

// chooseModel lists the models (no argument) or sets the model of the
// sessions this interface creates.
func (m *model) chooseModel(arg string) tea.Cmd {
	if m.models == nil {
		m.setNotice(false, "reading the connections…")
		return m.loadModels()
	}
	choices := m.models.choices()
	if arg == "" {
		if len(choices) == 0 {
			m.note(true, "no model connection is configured", "add one with 'maka connection add' (see 'maka connection add --help')")
			return nil
		}
		lines := []string{"models (/model CONNECTION/MODEL chooses one for new sessions):"}
		for _, c := range choices {
			mark := "  "
			if c == m.usedModel() {
				mark = "• "
			}
			l := mark + c.String()
			if c == m.models.Default {
				l += " (default)"
			}
			lines = append(lines, l)
		}
		m.note(false, strings.Join(lines, "\n"), "")
		return nil
	}
	var pick *ModelChoice
	for _, c := range choices {
		if c.String() == arg || c.Slug == arg && pick == nil {
			pick = &c
			if c.String() == arg {
				break
			}
		}
	}
	if pick == nil {
		m.setNotice(true, "no enabled model %q (/model lists them)", arg)
		return nil
	}
	m.nextTarget = pick
	if m.session == nil {
		m.note(false, "model of the new session: "+pick.String(), "")
		return nil
	}
	m.note(false, "new sessions use "+pick.String()+"; this one keeps "+m.usedModel().String(), "/new starts a session with it")
	return nil
}

// usedModel is the connection and model the current session's turns use
// (a new session: the one it will be created with), as far as known.
func (m *model) usedModel() ModelChoice {
	if m.session != nil {
		if t := m.session.ModelTarget; t.Kind == protocol.ModelTargetExplicit {
			return ModelChoice{t.ConnectionSlug, t.Model}
		}
	} else if m.nextTarget != nil {
		return *m.nextTarget
	}
	if m.models != nil {
		return m.models.Default
	}
	return ModelChoice{}
}

// completions lists what Tab may complete the input to.
func (m *model) completions() []string {
	v := m.input.Value()
	name, rest, hasArg := strings.Cut(v, " ")
	if !hasArg {
		var out []string
		for _, c := range slashCommands {
			if strings.HasPrefix(c.name, name) {
				out = append(out, c.name)
			}
		}
		return out
	}
	var options []string
	switch name {
	case "/mode":
		options = []string{"explore", "ask", "execute", "bypass"}
	case "/thinking":
		options = protocol.SessionThinkingLevels
	case "/model":
		if m.models != nil {
			for _, c := range m.models.choices() {
				options = append(options, c.String())
			}
		}
	}
	var out []string
	for _, o := range options {
		if strings.HasPrefix(o, rest) {
			out = append(out, name+" "+o)
		}
	}
	return out
}

// complete completes the input to the longest prefix of its completions
// (a whole command and a space when only one fits).
func (m *model) complete() {
	c := m.completions()
	switch len(c) {
	case 0:
		return
	case 1:
		v := c[0]
		if !strings.Contains(v, " ") && slices.ContainsFunc(slashCommands, func(s slashCommand) bool { return s.name == v && s.args != "" }) {
			v += " "
		}
		m.input.SetValue(v)
		return
	}
	p := c[0]
	for _, s := range c[1:] {
		for !strings.HasPrefix(s, p) {
			p = p[:len(p)-1]
		}
	}
	if len(p) > len(m.input.Value()) {
		m.input.SetValue(p)
	}
}

// suggestView lists the commands matching what is typed, above the input.
func (m *model) suggestView() string {
	v := m.input.Value()
	if !strings.HasPrefix(v, "/") || strings.Contains(v, "\n") || m.prompt != nil {
		return ""
	}
	name, _, hasArg := strings.Cut(v, " ")
	var parts []string
	for _, c := range slashCommands {
		if hasArg && c.name == name || !hasArg && strings.HasPrefix(c.name, name) {
			s := c.name
			if c.args != "" {
				s += " " + c.args
			}
			parts = append(parts, s+" — "+c.help)
		}
	}
	if len(parts) == 0 {
		return m.look.errText.MaxWidth(m.width).Render("  no such command (/help lists them)")
	}
	if len(parts) > 4 {
		parts = append(parts[:4], "…")
	}
	return m.look.hint.MaxWidth(m.width).Render("  " + strings.Join(parts, "\n  "))
}

// helpView is the help overlay, in height lines.
func (m *model) helpView(height int) string {
	lines := []string{m.look.listTitle.Render(" Keys")}
	for _, k := range helpKeys {
		lines = append(lines, "  "+m.look.user.Render(padRight(k[0], 20))+" "+k[1])
	}
	lines = append(lines, m.look.listTitle.Render(" Commands"))
	for _, c := range slashCommands {
		n := c.name
		if c.args != "" {
			n += " " + c.args
		}
		lines = append(lines, "  "+m.look.user.Render(padRight(n, 28))+" "+c.help)
	}
	clip := m.look.r.NewStyle().MaxWidth(m.width)
	for i := range lines {
		lines[i] = clip.Render(lines[i])
	}
	for len(lines) < height {
		lines = append(lines, "")
	}
	return strings.Join(lines[:height], "\n")
}

func padRight(s string, w int) string {
	if n := len([]rune(s)); n < w {
		return s + strings.Repeat(" ", w-n)
	}
	return s
}
