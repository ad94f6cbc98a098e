package interactions

import (
	"encoding/json"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/maka-agent/maka/internal/agent"
	"github.com/maka-agent/maka/internal/bashcategory"
	"github.com/maka-agent/maka/internal/tools"
	"github.com/maka-agent/maka/internal/wireredact"
	"github.com/maka-agent/maka/protocol"
)

// permissionRequest builds the wire request of a tool permission prompt:
// its review shows the call the way the protocol expects for the tool
// (Bash a command, Read/Write/Edit a path, Glob/Grep a search,
// WebFetch/WebSearch a web target, anything else a preview of its
// arguments). Review strings are made safe: control and bidirectional
// characters are replaced, secrets redacted and lengths bounded. A call
// that cannot be shown faithfully is refused with ErrInvalidRequest.
func permissionRequest(req agent.PermissionRequest) (protocol.InteractionRequest, error) {
	if !slices.Contains(protocol.ToolCategories, req.Category) {
		return protocol.InteractionRequest{}, invalid("unknown tool category %q", req.Category)
	}
	if req.Escalation {
		return escalationRequest(req)
	}
	review, err := toolReview(req)
	if err != nil {
		return protocol.InteractionRequest{}, err
	}
	wire := protocol.InteractionRequest{
		Kind:      protocol.InteractionKindPermission,
		ToolUseID: req.ToolUseID,
		Prompt: protocol.ToolPermissionPrompt{
			ToolName:               req.ToolName,
			Category:               req.Category,
			Reason:                 protocol.PermissionReasonForCategory(req.Category),
			Review:                 review,
			RememberForTurnAllowed: req.RememberAllowed,
		},
	}
	if err := wire.Validate(); err != nil {
		return protocol.InteractionRequest{}, invalid("%s: %v", req.ToolName, err)
	}
	return wire, nil
}

// escalationRequest builds the sandbox_escalation prompt of a Bash call
// that asks to run outside the sandbox (approved once or denied).
func escalationRequest(req agent.PermissionRequest) (protocol.InteractionRequest, error) {
	if req.ToolName != tools.NameBash {
		return protocol.InteractionRequest{}, invalid("%s cannot ask to leave the sandbox", req.ToolName)
	}
	cmd, err := requiredText(req.Args, "command", protocol.ReviewCommandMaxBytes, true)
	if err != nil {
		return protocol.InteractionRequest{}, err
	}
	if bashcategory.Categorize(cmd) != req.Category {
		return protocol.InteractionRequest{}, invalid("the command cannot be shown for review without changing its category")
	}
	wire := protocol.InteractionRequest{
		Kind:      protocol.InteractionKindPermission,
		ToolUseID: req.ToolUseID,
		Prompt: protocol.SandboxEscalationPrompt{
			Category: req.Category, Command: cmd, Cwd: req.Cwd, Trigger: protocol.SandboxTriggerProactive,
			AlsoApprovesToolExecution: true,
		},
	}
	if err := wire.Validate(); err != nil {
		return protocol.InteractionRequest{}, invalid("%s: %v", req.ToolName, err)
	}
	return wire, nil
}

// questionRequest builds the wire request of a question prompt.
func questionRequest(toolUseID string, questions []tools.Question) (protocol.InteractionRequest, error) {
	wire := protocol.InteractionRequest{
		Kind:      protocol.InteractionKindQuestion,
		ToolUseID: toolUseID,
		Questions: make([]protocol.InteractionQuestion, 0, len(questions)),
	}
	for _, q := range questions {
		wq := protocol.InteractionQuestion{Question: q.Question, Options: make([]protocol.InteractionOption, 0, len(q.Options))}
		for _, o := range q.Options {
			wq.Options = append(wq.Options, protocol.InteractionOption{Label: o.Label, Description: o.Description})
		}
		wire.Questions = append(wire.Questions, wq)
	}
	if err := wire.Validate(); err != nil {
		return protocol.InteractionRequest{}, invalid("questions: %v", err)
	}
	return wire, nil
}

func toolReview(req agent.PermissionRequest) (protocol.ToolReview, error) {
	args := req.Args
	switch req.ToolName {
	case tools.NameBash:
		cmd, err := requiredText(args, "command", protocol.ReviewCommandMaxBytes, true)
		if err != nil {
			return nil, err
		}
		if bashcategory.Categorize(cmd) != req.Category {
			return nil, invalid("the command cannot be shown for review without changing its category")
		}
		return protocol.CommandReview{Command: cmd}, nil
	case tools.NameRead, tools.NameWrite, tools.NameEdit:
		p, err := requiredText(args, "path", protocol.ReviewPathMaxBytes, false)
		if err != nil {
			return nil, err
		}
		op := map[string]string{tools.NameRead: "read", tools.NameWrite: "write", tools.NameEdit: "edit"}[req.ToolName]
		r := protocol.PathReview{Operation: op, Path: p}
		switch req.ToolName {
		case tools.NameWrite:
			r.Content = linesPreview(args, "content")
		case tools.NameEdit:
			r.OldString, r.NewString = linesPreview(args, "old_string"), linesPreview(args, "new_string")
		}
		return r, nil
	case tools.NameGlob, tools.NameGrep:
		pattern, err := requiredText(args, "pattern", protocol.ReviewTextMaxBytes, false)
		if err != nil {
			return nil, err
		}
		rootKey := "path"
		if req.ToolName == tools.NameGlob {
			rootKey = "cwd"
		}
		r := protocol.SearchReview{Operation: strings.ToLower(req.ToolName), Pattern: pattern, Root: "."}
		if root := reviewText(stringArg(args, rootKey), protocol.ReviewPathMaxBytes, false); root != "" {
			r.Root = root
		}
		if req.ToolName == tools.NameGrep {
			if g := reviewText(stringArg(args, "glob"), protocol.ReviewTextMaxBytes, false); g != "" {
				r.Glob = &g
			}
		}
		return r, nil
	case "WebFetch":
		u, err := requiredText(args, "url", protocol.ReviewTextMaxBytes, false)
		if err != nil {
			return nil, err
		}
		return protocol.WebReview{TargetKind: "url", Target: u}, nil
	case "WebSearch":
		q, err := requiredText(args, "query", protocol.ReviewTextMaxBytes, false)
		if err != nil {
			return nil, err
		}
		return protocol.WebReview{TargetKind: "query", Target: q}, nil
	}
	if req.Category == protocol.ToolCategoryComputerUse || req.Category == protocol.ToolCategoryBrowser || req.ToolName == "WriteStdin" {
		return nil, invalid("%s calls have no review in this host", req.ToolName)
	}
	canonical := string(tools.CanonicalJSON(args))
	if strings.TrimSpace(canonical) == "" {
		canonical = "{}"
	}
	safe := sanitize(canonical, false)
	text, cut := fitEncoded(safe, protocol.ReviewTextMaxBytes)
	return protocol.ToolArgumentsReview{Arguments: protocol.ReviewTextPreview{
		Text: text, Bytes: int64(len(canonical)), Truncated: cut,
	}, ServerReadOnlyHint: req.ServerReadOnlyHint}, nil
}

// linesPreview is the bounded preview of the string argument key, line by
// line (nil when the call has no such string): each line made safe review
// text and redacted, cut at the preview's bounds and then marked truncated.
// It shows what a call would write; the approval is of the path.
func linesPreview(args json.RawMessage, key string) *protocol.ReviewLinesPreview {
	var fields map[string]json.RawMessage
	if json.Unmarshal(args, &fields) != nil {
		return nil
	}
	var raw string
	if v, ok := fields[key]; !ok || json.Unmarshal(v, &raw) != nil {
		return nil
	}
	p := &protocol.ReviewLinesPreview{Lines: []string{}, Bytes: int64(len(raw))}
	total := 0
	for line := range strings.SplitSeq(strings.TrimSuffix(raw, "\n"), "\n") {
		if len(p.Lines) == protocol.ReviewPreviewMaxLines {
			p.Truncated = true
			break
		}
		// A tab keeps its indentation (sanitize would make it one space).
		shown := sanitize(strings.ReplaceAll(strings.TrimSuffix(line, "\r"), "\t", "    "), false)
		if total+len(shown) > protocol.ReviewPreviewMaxBytes {
			shown, _ = fitBytes(shown, protocol.ReviewPreviewMaxBytes-total)
			p.Lines = append(p.Lines, shown)
			p.Truncated = true
			break
		}
		total += len(shown)
		p.Lines = append(p.Lines, shown)
	}
	return p
}

// fitBytes cuts s to at most n bytes on a rune boundary.
func fitBytes(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], true
}

// requiredText is the safe review form of the string argument key, which
// must not be empty. A value too long to be shown whole is refused: a
// reviewer (or a rule matching the shown text) must never approve more
// than it saw.
func requiredText(args json.RawMessage, key string, maxBytes int, command bool) (string, error) {
	raw := stringArg(args, key)
	plain := replaceControls(raw, command)
	shown := redact(plain)
	if shown != plain {
		// Whatever the redactor takes for a secret would be shown as
		// [REDACTED], hiding what would run: the call is refused instead.
		return "", invalid("the %q argument holds what looks like a secret (or a credential assignment), which a review cannot show; pass secrets through the environment or a file instead", key)
	}
	s, cut := fitEncoded(shown, maxBytes)
	if cut {
		return "", invalid("the %q argument (%d bytes) is too long to be shown for review; split it into shorter calls", key, len(raw))
	}
	if s == "" {
		return "", invalid("the call has no %q argument to review", key)
	}
	return s, nil
}

// reviewText makes s safe canonical review text of at most maxBytes
// (encoded as JSON too).
func reviewText(s string, maxBytes int, command bool) string {
	out, _ := fitEncoded(sanitize(s, command), maxBytes)
	return out
}

// sanitize replaces what a review may not contain and redacts secrets.
func sanitize(s string, command bool) string { return redact(replaceControls(s, command)) }

// replaceControls replaces what a review may not contain. Whitespace
// controls become spaces; in a command a line feed, which separates
// statements, becomes "; " so that the command keeps its statements (and
// its category); other control, line-separator and bidirectional
// characters, and invalid UTF-8, become U+FFFD.
func replaceControls(s string, command bool) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == '\n' && command:
			b.WriteString("; ")
		case r == '\n' || r == '\t' || r == '\v' || r == '\f' || r == '\r' || r == 0x2028 || r == 0x2029:
			b.WriteByte(' ')
		case r == utf8.RuneError && size == 1, r < 0x20, r >= 0x7f && r <= 0x9f,
			r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			b.WriteRune(utf8.RuneError)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// redact masks secrets with the tools' redactor and then the wire's, which
// review text must pass unchanged.
func redact(s string) string {
	out := tools.Redact(s)
	for i := 0; i < 3 && wireredact.Contains(out); i++ {
		out = wireredact.Redact(out)
	}
	return out
}

// fitEncoded cuts s, which holds no control characters, on a rune boundary
// so that both s and its JSON string body are at most maxBytes; cut reports
// whether anything was removed.
func fitEncoded(s string, maxBytes int) (out string, cut bool) {
	n := 0
	for i, r := range s {
		w := utf8.RuneLen(r)
		if r == '"' || r == '\\' {
			w = 2
		}
		if n+w > maxBytes {
			return s[:i], true
		}
		n += w
	}
	return s, false
}

// stringArg returns the string argument key of a JSON object, or "".
func stringArg(args json.RawMessage, key string) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(args, &m) != nil {
		return ""
	}
	var s string
	if json.Unmarshal(m[key], &s) != nil {
		return ""
	}
	return s
}
