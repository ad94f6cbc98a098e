package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/maka-agent/maka/internal/bashcategory"
	"github.com/maka-agent/maka/internal/tools"
	"github.com/maka-agent/maka/protocol"
)

func permission(tool, category string, review protocol.ToolReview, remember bool) protocol.InteractionRequest {
	return protocol.InteractionRequest{Kind: protocol.InteractionKindPermission, ToolUseID: "u1",
		Prompt: protocol.ToolPermissionPrompt{ToolName: tool, Category: category, Reason: protocol.PermissionReasonForCategory(category),
			Review: review, RememberForTurnAllowed: remember}}
}

// TestSuggestRule checks that the rule a denied run suggests is valid and,
// given to the host's engine, allows the very call that was denied (and
// that a sandbox escalation, which only a person can approve, gets none).
func TestSuggestRule(t *testing.T) {
	npmTest := permission("Bash", protocol.ToolCategoryShellUnsafe, protocol.CommandReview{Command: "npm   test"}, true)
	quoted := permission("Bash", protocol.ToolCategoryShellUnsafe, protocol.CommandReview{Command: "echo 'a  b'"}, true)
	twoLines := permission("Bash", protocol.ToolCategoryShellUnsafe, protocol.CommandReview{Command: "make\nmake install"}, true)
	write := permission("Write", protocol.ToolCategoryFileWrite, protocol.PathReview{Operation: "write", Path: "a.txt"}, true)
	escalate := protocol.InteractionRequest{Kind: protocol.InteractionKindPermission, Prompt: protocol.SandboxEscalationPrompt{
		Category: bashcategory.Categorize("git push"), Command: "git push", Cwd: "/w", Trigger: protocol.SandboxTriggerProactive}}
	registry := tools.NewRegistry(tools.Builtins()...)
	cases := []struct {
		name    string
		req     protocol.InteractionRequest
		args    string
		suggest string
	}{
		{"command", npmTest, `{"command":"npm   test"}`, "Bash(npm test)"},
		{"quoted blanks kept", quoted, `{"command":"echo 'a  b'"}`, "Bash(echo 'a  b')"},
		{"two lines", twoLines, `{"command":"make\nmake install"}`, "Bash(make\nmake install)"},
		{"write by name", write, `{"path":"a.txt","content":"x"}`, "Write"},
		{"sandbox escalation", escalate, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pr := describePermission(tc.req)
			got := pr.suggestRule()
			if got != tc.suggest {
				t.Fatalf("suggested %q, want %q", got, tc.suggest)
			}
			if got == "" {
				return
			}
			rule, err := tools.ParseRule(tools.RuleAllow, got)
			if err != nil {
				t.Fatalf("suggestion %q: %v", got, err)
			}
			tool, _ := registry.Lookup(pr.tool)
			v := tools.NewEngine(tools.Policy{Mode: tools.ModeAsk, Rules: []tools.Rule{rule}, Workspace: t.TempDir()}).Evaluate(tool, json.RawMessage(tc.args))
			if v.Decision != tools.Allow {
				t.Fatalf("suggestion %q does not allow the call: %s", got, v.Decision)
			}
		})
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"plain":          "plain",
		"/tmp/a-b_c.d":   "/tmp/a-b_c.d",
		"Bash(npm test)": "'Bash(npm test)'",
		"it's":           `'it'\''s'`,
		"":               "''",
		"a b":            "'a b'",
		"$HOME":          "'$HOME'",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseTimeout(t *testing.T) {
	for in, want := range map[string]time.Duration{"90s": 90 * time.Second, "5m": 5 * time.Minute, "2": 2 * time.Second, "0.5": 500 * time.Millisecond} {
		if got, err := parseTimeout(in); err != nil || got != want {
			t.Errorf("parseTimeout(%q) = %v %v, want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1s", "soon", "-3"} {
		if _, err := parseTimeout(in); err == nil {
			t.Errorf("parseTimeout(%q) accepted", in)
		}
	}
}

func TestSessionName(t *testing.T) {
	for in, want := range map[string]string{
		"  fix the\tbuild \nand more": "fix the build",
		strings.Repeat("é", 100):      strings.Repeat("é", 79) + "…",
		"a\x00b":                      "a b",
	} {
		if got := sessionName(in); got != want {
			t.Errorf("sessionName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPrinterText(t *testing.T) {
	var out, errw bytes.Buffer
	p := newPrinter(&out, &errw, false)
	ms := int64(12)
	p.delta(protocol.SessionAssistantDelta{Kind: protocol.DeltaText, Text: "Look"})
	p.delta(protocol.SessionAssistantDelta{Kind: protocol.DeltaThinking, Text: "hmm"})
	p.tool(protocol.SessionToolEvent{Type: protocol.ToolStart, ToolUseID: "u1", ToolName: "Bash", TS: 100})
	p.tool(protocol.SessionToolEvent{Type: protocol.ToolOutputDelta, ToolUseID: "u1", Chunk: "x"})
	p.tool(protocol.SessionToolEvent{Type: protocol.ToolResult, ToolUseID: "u1", Status: "completed", DurationMs: &ms, TS: 200})
	p.tool(protocol.SessionToolEvent{Type: protocol.ToolStart, ToolUseID: "u2", ToolName: "Read", TS: 300})
	p.tool(protocol.SessionToolEvent{Type: protocol.ToolResult, ToolUseID: "u2", Status: "errored", TS: 305})
	p.delta(protocol.SessionAssistantDelta{Kind: protocol.DeltaText, Text: "ed."})
	p.endText()
	if out.String() != "Looked.\n" {
		t.Errorf("stdout %q", out.String())
	}
	if want := "▸ Bash\n✓ Bash (12 ms)\n▸ Read\n✗ Read (5 ms) errored\n"; errw.String() != want {
		t.Errorf("stderr %q, want %q", errw.String(), want)
	}
	if len(p.tools) != 0 {
		t.Errorf("finished tools still tracked: %v", p.tools)
	}
}

func TestPrinterJSON(t *testing.T) {
	var out, errw bytes.Buffer
	p := newPrinter(&out, &errw, true)
	p.delta(protocol.SessionAssistantDelta{Kind: protocol.DeltaText, TurnID: "t", Text: "<a&b>"})
	p.delta(protocol.SessionAssistantDelta{Kind: protocol.DeltaThinking, TurnID: "t", Text: "hmm"})
	p.tool(protocol.SessionToolEvent{Type: protocol.ToolStart, TurnID: "t", ToolUseID: "u1", ToolName: "Bash", TS: 1})
	p.tool(protocol.SessionToolEvent{Type: protocol.ToolResult, TurnID: "t", ToolUseID: "u1", Status: "completed", TS: 4})
	p.notef("not in JSON mode")
	p.endText()
	if errw.Len() != 0 {
		t.Errorf("stderr %q", errw.String())
	}
	var types []string
	for _, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		var ev event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		types = append(types, ev.Type)
		if ev.Type == "tool_result" && (ev.DurationMs == nil || *ev.DurationMs != 3 || ev.ToolName != "Bash") {
			t.Errorf("tool_result %+v", ev)
		}
	}
	if strings.Join(types, ",") != "text,thinking,tool_start,tool_result" {
		t.Errorf("types %v", types)
	}
	if !strings.Contains(out.String(), `"text":"<a&b>"`) {
		t.Errorf("text escaped: %s", out.String())
	}
}

// answered records the answers a prompter sends.
type answered struct {
	id  string
	ans protocol.InteractionAnswer
}

func pendingSnapshot(id string, req protocol.InteractionRequest) protocol.InteractionSnapshot {
	return protocol.InteractionSnapshot{InteractionID: id, SessionID: "s", TurnID: "t", RunID: "r", Revision: 1,
		Request: req, Status: protocol.InteractionStatusPending}
}

func TestPrompter(t *testing.T) {
	var out, errw bytes.Buffer
	var sent []answered
	a := &attachment{p: newPrinter(&out, &errw, false), turns: map[string]protocol.TurnStatus{},
		send: func(_ context.Context, id string, ans protocol.InteractionAnswer) error {
			sent = append(sent, answered{id, ans})
			return nil
		}}
	pr := &prompter{w: &errw}
	a.prompts = pr
	ctx := context.Background()
	perm := pendingSnapshot("i1", permission("Bash", protocol.ToolCategoryShellUnsafe, protocol.CommandReview{Command: "make"}, true))
	question := pendingSnapshot("i2", protocol.InteractionRequest{Kind: protocol.InteractionKindQuestion, ToolUseID: "u2",
		Questions: []protocol.InteractionQuestion{
			{Question: "Which?", Options: []protocol.InteractionOption{{Label: "left"}, {Label: "right", Description: "the other"}}},
			{Question: "Why?", Options: []protocol.InteractionOption{{Label: "x"}, {Label: "y"}}},
		}})
	other := pendingSnapshot("i3", permission("Write", protocol.ToolCategoryFileWrite, protocol.PathReview{Operation: "write", Path: "f"}, false))

	pr.update(ctx, a, []protocol.InteractionSnapshot{perm, question})
	if !strings.Contains(errw.String(), "? Allow Bash `make` [shell_unsafe]  [y]es / [n]o / [a]lways this turn: ") {
		t.Fatalf("prompt %q", errw.String())
	}
	pr.update(ctx, a, []protocol.InteractionSnapshot{perm, question}) // no second prompt
	if strings.Count(errw.String(), "? Allow") != 1 {
		t.Fatalf("prompted twice: %q", errw.String())
	}
	pr.input(ctx, a, "maybe") // asked again
	if strings.Count(errw.String(), "? Allow") != 2 || len(sent) != 0 {
		t.Fatalf("invalid input: %q, sent %v", errw.String(), sent)
	}
	pr.input(ctx, a, "A")
	if len(sent) != 1 || sent[0].id != "i1" || sent[0].ans.Decision != protocol.InteractionDecisionAllow || !sent[0].ans.RememberForTurn {
		t.Fatalf("sent %+v", sent)
	}
	// The question follows, one prompt per question.
	if !strings.Contains(errw.String(), "? Which?\n  1. left\n  2. right — the other\n") {
		t.Fatalf("question prompt %q", errw.String())
	}
	pr.input(ctx, a, "2")
	pr.input(ctx, a, "")
	if len(sent) != 2 || sent[1].id != "i2" || len(sent[1].ans.Answers) != 2 || *sent[1].ans.Answers[0] != "right" || sent[1].ans.Answers[1] != nil {
		t.Fatalf("question answers %+v", sent)
	}
	// An interaction answered elsewhere is dropped from the prompt.
	pr.update(ctx, a, []protocol.InteractionSnapshot{other})
	if !strings.Contains(errw.String(), "? Allow Write `write f` [file_write]  [y]es / [n]o: ") {
		t.Fatalf("third prompt %q", errw.String())
	}
	pr.update(ctx, a, nil)
	if !strings.Contains(errw.String(), "(answered elsewhere)") || len(pr.queue) != 0 {
		t.Fatalf("after the interaction left: %q, queue %v", errw.String(), pr.queue)
	}
	pr.input(ctx, a, "y") // nothing is asked any more
	if len(sent) != 2 {
		t.Fatalf("answered a prompt that is gone: %+v", sent)
	}
}

func TestLineReaderStops(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	lr := startLineReader(r)
	if _, err := w.WriteString("first\nsecond\npartial"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"first", "second"} {
		select {
		case got := <-lr.lines:
			if got != want {
				t.Fatalf("line %q, want %q", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no line")
		}
	}
	// stop ends the reader although no more input comes.
	lr.stop()
	if _, ok := <-lr.lines; ok {
		t.Fatal("lines not closed after stop")
	}
}

func TestLineReaderEndsAtEOF(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	lr := startLineReader(r)
	_, _ = w.WriteString("only\n")
	w.Close()
	if got := <-lr.lines; got != "only" {
		t.Fatalf("line %q", got)
	}
	if _, ok := <-lr.lines; ok {
		t.Fatal("lines not closed at EOF")
	}
	lr.stop()
}
