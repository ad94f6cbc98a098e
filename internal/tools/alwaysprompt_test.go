package tools

import (
	"encoding/json"
	"testing"
)

// promptingTool asks for approval below bypass (an MCP tool).
type promptingTool struct{ fakeTool }

func (promptingTool) PromptBelowBypass() bool { return true }

// A tool that always prompts does so in explore, ask and execute, runs in
// bypass, runs when an allow rule names it and is refused by a deny rule.
func TestAlwaysPromptToolIsGatedInEveryModeButBypass(t *testing.T) {
	tool := promptingTool{fakeTool{name: "mcp__echo__echo", perm: true}}
	args := json.RawMessage(`{"text":"x"}`)
	want := map[Mode]Decision{ModeExplore: Prompt, ModeAsk: Prompt, ModeExecute: Prompt, ModeBypass: Allow}
	for mode, d := range want {
		if got := NewEngine(Policy{Mode: mode}).Evaluate(tool, args); got.Decision != d || got.Category != "custom_tool" {
			t.Errorf("%s: %s (%s), want %s", mode, got.Decision, got.Category, d)
		}
	}
	for _, tc := range []struct {
		effect, rule string
		want         Decision
	}{
		{RuleAllow, "mcp__echo__echo", Allow},
		{RuleAllow, "mcp__echo__other", Prompt},
		{RuleDeny, "mcp__echo__echo", Block},
	} {
		r, err := ParseRule(tc.effect, tc.rule)
		if err != nil {
			t.Fatal(err)
		}
		if got := NewEngine(Policy{Mode: ModeExecute, Rules: []Rule{r}}).Evaluate(tool, args); got.Decision != tc.want {
			t.Errorf("%s %s in execute: %s, want %s", tc.effect, tc.rule, got.Decision, tc.want)
		}
	}
	// Remembering an approval covers those exact arguments only.
	e := NewEngine(Policy{Mode: ModeAsk})
	v := e.Evaluate(tool, args)
	e.Remember(v.ScopeKey)
	if got := e.Evaluate(tool, args); got.Decision != Allow {
		t.Errorf("remembered call: %s", got.Decision)
	}
	if got := e.Evaluate(tool, json.RawMessage(`{"text":"y"}`)); got.Decision != Prompt {
		t.Errorf("other arguments after a remembered call: %s", got.Decision)
	}
}

// With adds dynamic tools after the registry's own, never replacing one.
func TestRegistryWithDynamicTools(t *testing.T) {
	base := NewRegistry(fakeTool{name: "Read"})
	r := base.With(fakeTool{name: "mcp__a__b"}, fakeTool{name: "read", perm: true})
	specs := r.Specs()
	if len(specs) != 2 || specs[0].Name != "Read" || specs[1].Name != "mcp__a__b" {
		t.Fatalf("specs %+v", specs)
	}
	if len(base.Specs()) != 1 {
		t.Fatal("With changed its receiver")
	}
	if got := (*Registry)(nil).With(fakeTool{name: "x"}); len(got.Specs()) != 1 {
		t.Fatal("With on no registry")
	}
}
