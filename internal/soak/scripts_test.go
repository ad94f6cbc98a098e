package soak_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/maka-agent/maka/internal/model"
)

// Turn kinds of the soak. The user message of a turn is "<kind> <turnID>";
// the model's answer streams text with small delays, echoes the user
// message, and for every kind but text calls one tool between two steps.
const (
	kindText = "text"
	kindRead = "read"
	kindGlob = "glob"
	kindBash = "bash"
)

// segment is one event of a scripted step: a text, the echo of the user
// message, or a tool call.
type segment struct {
	text string
	echo bool
	tool *model.ScriptToolCall
}

// soakSteps returns the steps of a kind; a delay follows every segment.
func soakSteps(kind string) [][]segment {
	words := func(prefix string, n int) []segment {
		out := make([]segment, n)
		for i := range out {
			out[i] = segment{text: fmt.Sprintf("%s%d ", prefix, i)}
		}
		return out
	}
	call := func(name, input string) segment {
		return segment{tool: &model.ScriptToolCall{Name: name, Input: json.RawMessage(input)}}
	}
	answer := func(lead string) []segment {
		return append([]segment{{text: lead}, {echo: true}, {text: ". "}}, words("w", 8)...)
	}
	switch kind {
	case kindRead:
		return [][]segment{{{text: "Reading the notes. "}, call("Read", `{"path":"notes.txt"}`)}, answer("Read for ")}
	case kindGlob:
		return [][]segment{{{text: "Listing the files. "}, call("Glob", `{"pattern":"*.txt"}`)}, answer("Listed for ")}
	case kindBash:
		return [][]segment{{{text: "Running a command. "}, call("Bash", `{"command":"echo soak | tee /dev/null"}`)}, answer("Ran it for ")}
	default:
		return [][]segment{append([]segment{{text: "Sure. "}, {echo: true}, {text: ": "}}, words("t", 14)...)}
	}
}

// soakScript builds the model script of a kind, delayMs after each
// segment.
func soakScript(t *testing.T, kind string, delayMs int64) *model.Script {
	t.Helper()
	var s model.Script
	for _, step := range soakSteps(kind) {
		var st model.ScriptStep
		for _, seg := range step {
			var ev model.ScriptEvent
			switch {
			case seg.tool != nil:
				ev.ToolCall = seg.tool
			case seg.echo:
				yes := true
				ev.Echo = &yes
			default:
				text := seg.text
				ev.Text = &text
			}
			d := delayMs
			st.Events = append(st.Events, ev, model.ScriptEvent{DelayMs: &d})
		}
		s.Steps = append(s.Steps, st)
	}
	// Round-trip through the parser so that the script is validated like
	// one loaded from a file.
	b, err := json.Marshal(&s)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := model.ParseScript(b)
	if err != nil {
		t.Fatal(err)
	}
	return parsed
}

// expectedText is the whole assistant text of a completed turn of kind
// whose user message is user.
func expectedText(kind, user string) string {
	var b strings.Builder
	for _, step := range soakSteps(kind) {
		for _, seg := range step {
			switch {
			case seg.echo:
				b.WriteString(user)
			case seg.tool == nil:
				b.WriteString(seg.text)
			}
		}
	}
	return b.String()
}

// dispatcher is the soak's model provider: it plays the scripted provider
// of the kind named by the first word of the last user message.
type dispatcher map[string]model.Provider

func newDispatcher(t *testing.T, delayMs int64) dispatcher {
	d := dispatcher{}
	for _, k := range []string{kindText, kindRead, kindGlob, kindBash} {
		d[k] = model.NewScripted(soakScript(t, k, delayMs), nil)
	}
	return d
}

// Stream implements model.Provider.
func (d dispatcher) Stream(ctx context.Context, req model.Request, emit func(model.Event) error) (model.Finish, error) {
	last := ""
	for _, m := range req.Messages {
		if m.Role == model.RoleUser {
			last = m.Text
		}
	}
	kind, _, _ := strings.Cut(last, " ")
	p, ok := d[kind]
	if !ok {
		p = d[kindText]
	}
	return p.Stream(ctx, req, emit)
}
