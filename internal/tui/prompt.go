package tui

import (
	"fmt"
	"strings"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/maka-agent/maka/protocol"
)

// promptState is the pending interaction shown as a modal card: a
// permission request, or questions answered one after the other.
type promptState struct {
	it protocol.InteractionSnapshot
	// answers so far of a question request (one per answered question).
	answers []*string
}

// syncPrompt shows the first pending interaction not yet answered here and
// forgets answered ones that left the projection.
func (m *model) syncPrompt() {
	var pending []protocol.InteractionSnapshot
	if m.snap != nil {
		pending = m.snap.Interactions.Pending
	}
	still := make(map[string]bool, len(pending))
	asking := make(map[string]bool, len(pending))
	var next *protocol.InteractionSnapshot
	for i := range pending {
		it := &pending[i]
		still[it.InteractionID] = true
		asking[it.Request.ToolUseID] = true
		if next == nil && it.Status == protocol.InteractionStatusPending && !m.answered[it.InteractionID] {
			next = it
		}
	}
	for id := range m.answered {
		if !still[id] {
			delete(m.answered, id)
		}
	}
	for _, e := range m.entries {
		if e.kind == entryTool && e.tool.waiting != asking[e.id] {
			e.tool.waiting = asking[e.id]
			e.touch()
		}
	}
	switch {
	case next == nil:
		m.prompt = nil
	case m.prompt == nil || m.prompt.it.InteractionID != next.InteractionID:
		m.prompt = &promptState{it: *next}
	}
}

// rememberAllowed reports whether a permission prompt offers "allow for
// the rest of the turn".
func rememberAllowed(p protocol.PermissionPrompt) bool {
	tp, ok := p.(protocol.ToolPermissionPrompt)
	return ok && tp.RememberForTurnAllowed
}

// promptKey answers the shown prompt: y allow, n deny, a allow for the
// rest of the turn; for questions, a number picks an option of the current
// question and s skips it. Other printable keys are swallowed.
func (m *model) promptKey(k tea.KeyMsg) tea.Cmd {
	p := m.prompt
	key := k.String()
	if p.it.Request.Kind == protocol.InteractionKindPermission {
		switch key {
		case "y":
			return m.answer(protocol.InteractionAnswer{Kind: protocol.InteractionKindPermission, Decision: protocol.InteractionDecisionAllow})
		case "n":
			return m.answer(protocol.InteractionAnswer{Kind: protocol.InteractionKindPermission, Decision: protocol.InteractionDecisionDeny})
		case "a":
			if rememberAllowed(p.it.Request.Prompt) {
				return m.answer(protocol.InteractionAnswer{Kind: protocol.InteractionKindPermission, Decision: protocol.InteractionDecisionAllow, RememberForTurn: true})
			}
		}
		return nil
	}
	qs := p.it.Request.Questions
	if len(p.answers) >= len(qs) {
		return nil
	}
	q := qs[len(p.answers)]
	switch {
	case key == "s":
		p.answers = append(p.answers, nil)
	case len(key) == 1 && key[0] >= '1' && key[0] <= '9' && int(key[0]-'1') < len(q.Options):
		label := q.Options[key[0]-'1'].Label
		p.answers = append(p.answers, &label)
	default:
		return nil
	}
	if len(p.answers) < len(qs) {
		return nil
	}
	return m.answer(protocol.InteractionAnswer{Kind: protocol.InteractionKindQuestion, Answers: p.answers})
}

// answer sends the answer of the shown prompt and moves to the next one.
func (m *model) answer(a protocol.InteractionAnswer) tea.Cmd {
	id := m.prompt.it.InteractionID
	m.answered[id] = true
	m.prompt = nil
	m.syncPrompt()
	return m.answerInteraction(id, a)
}

// promptLines renders the shown prompt's card body.
func (m *model) promptLines() (title string, lines []string, keys string) {
	p := m.prompt
	req := p.it.Request
	if req.Kind == protocol.InteractionKindQuestion {
		i := min(len(p.answers), len(req.Questions)-1)
		q := req.Questions[i]
		title = "Question"
		if len(req.Questions) > 1 {
			title = fmt.Sprintf("Question %d of %d", i+1, len(req.Questions))
		}
		lines = append(lines, q.Question)
		for j, o := range q.Options {
			l := fmt.Sprintf("  %d) %s", j+1, o.Label)
			if o.Description != "" {
				l += " — " + o.Description
			}
			lines = append(lines, l)
		}
		return title, lines, "[1-" + fmt.Sprint(len(q.Options)) + "] choose · [s] skip"
	}
	title = "Permission needed"
	keys = "[y] allow · [n] deny"
	switch pr := req.Prompt.(type) {
	case protocol.ToolPermissionPrompt:
		lines = append(lines, fmt.Sprintf("%s · %s (%s)", pr.ToolName, pr.Category, pr.Reason))
		lines = append(lines, reviewLines(pr.Review)...)
		if pr.RememberForTurnAllowed {
			keys += " · [a] allow for the rest of the turn"
		}
	case protocol.AdditionalPermissionsPrompt:
		lines = append(lines, fmt.Sprintf("%s · %s asks for more access", pr.ToolName, pr.Category))
		lines = append(lines, "cwd: "+pr.Review.Cwd)
		for _, path := range pr.Review.Paths {
			lines = append(lines, fmt.Sprintf("%s %s (%s)", path.Access, path.Path, path.Scope))
		}
		if pr.Review.NetworkEnabled {
			lines = append(lines, "network access")
		}
		if pr.Risk.OutsideWorkspace {
			lines = append(lines, "! outside the workspace")
		}
		if pr.Risk.ProtectedMetadata {
			lines = append(lines, "! touches protected metadata")
		}
	case protocol.SandboxEscalationPrompt:
		lines = append(lines, fmt.Sprintf("Bash · %s wants to run outside the sandbox (%s)", pr.Category, pr.Trigger))
		lines = append(lines, "$ "+pr.Command, "cwd: "+pr.Cwd)
	default:
		lines = append(lines, "tool "+req.ToolUseID)
	}
	return title, lines, keys
}

// reviewLines describes what a tool permission would allow.
func reviewLines(r protocol.ToolReview) []string {
	switch r := r.(type) {
	case protocol.CommandReview:
		l := []string{"$ " + r.Command}
		if r.Cwd != nil {
			l = append(l, "cwd: "+*r.Cwd)
		}
		return l
	case protocol.PathReview:
		return append([]string{r.Operation + " " + r.Path}, pathPreview(r)...)
	case protocol.SearchReview:
		l := fmt.Sprintf("%s %q in %s", r.Operation, r.Pattern, r.Root)
		if r.Glob != nil {
			l += " (" + *r.Glob + ")"
		}
		return []string{l}
	case protocol.WebReview:
		return []string{r.TargetKind + ": " + r.Target}
	case protocol.ToolArgumentsReview:
		l := []string{previewText(r.Arguments)}
		if r.ServerReadOnlyHint != nil {
			claim := "may change things"
			if *r.ServerReadOnlyHint {
				claim = "only reads"
			}
			l = append(l, "its MCP server says it "+claim+" (not verified)")
		}
		return l
	case protocol.StdinReview:
		var l []string
		if r.Ref != nil {
			l = append(l, "process: "+*r.Ref)
		}
		if r.Input != nil {
			l = append(l, "input: "+previewText(*r.Input))
		}
		if r.Size != nil {
			l = append(l, fmt.Sprintf("resize to %dx%d", r.Size.Cols, r.Size.Rows))
		}
		return l
	case protocol.ComputerUseReview:
		l := r.Action + " (" + r.ApprovalClass + ")"
		if r.App != nil {
			l += " in " + *r.App
		}
		return []string{l}
	case protocol.BrowserNavigateReview:
		return []string{"navigate to " + r.URL}
	case protocol.BrowserSnapshotReview:
		return []string{"take a page snapshot"}
	case protocol.BrowserClickReview:
		return []string{"click " + r.Ref}
	case protocol.BrowserTypeReview:
		l := "type into " + r.Ref + ": " + previewText(r.Input)
		if r.Submit {
			l += " and submit"
		}
		return []string{l}
	case protocol.BrowserWaitReview:
		return []string{fmt.Sprintf("wait for %s %q (%gs)", r.Condition, r.Value, r.TimeoutSeconds)}
	case protocol.BrowserDurationWaitReview:
		return []string{fmt.Sprintf("wait %gs", r.Seconds)}
	case protocol.BrowserExtractReview:
		l := fmt.Sprintf("extract page text from %d", r.Start)
		if r.Selector != nil && *r.Selector != "" {
			l += " of " + *r.Selector
		}
		return []string{l}
	}
	return nil
}

func previewText(p protocol.ReviewTextPreview) string {
	t := strings.TrimSpace(p.Text)
	if p.Truncated {
		t += fmt.Sprintf(" … (%d bytes)", p.Bytes)
	}
	return t
}
