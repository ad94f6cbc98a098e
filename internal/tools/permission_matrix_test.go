package tools

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/maka-agent/maka/internal/sandbox"
	"github.com/maka-agent/maka/protocol"
)

// TestPermissionMatrixWithRulesAndSandbox decides one call of every
// category in every mode, with no rule, an allow rule and a deny rule for
// its category, on a machine with and without a sandbox, and checks the
// decision (a Prompt is what makes a client show a prompt), the sandbox the
// call would run in and whether the prompt asks to leave the sandbox.
func TestPermissionMatrixWithRulesAndSandbox(t *testing.T) {
	const A, B, P = Allow, Block, Prompt
	const off, ww, ro = sandbox.Off, sandbox.WorkspaceWrite, sandbox.ReadOnly
	type cell struct {
		d   Decision
		box sandbox.Mode
		esc bool
	}
	type row struct {
		name string
		tool Tool
		args string
		cat  string
		// per mode (explore, ask, execute, bypass), without and with a
		// sandbox, with no rule.
		without, with [4]cell
	}
	fake := func(cat string) Tool { return categorizedTool{fakeTool{name: "Custom", perm: true, category: cat}} }
	same := func(d [4]Decision) [4]cell {
		return [4]cell{{d: d[0], box: off}, {d: d[1], box: off}, {d: d[2], box: off}, {d: d[3], box: off}}
	}
	bash := byName(t, NameBash)
	shellRow := func(name, cmd, cat string) row {
		return row{name, bash, fmt.Sprintf(`{"command":%q}`, cmd), cat,
			[4]cell{{B, off, false}, {P, off, false}, {P, off, false}, {A, off, false}},
			[4]cell{{B, ro, false}, {P, ww, false}, {P, ww, false}, {A, off, false}}}
	}
	rows := []row{
		{"read", fake("read"), `{}`, "read", same([4]Decision{A, A, A, A}), same([4]Decision{A, A, A, A})},
		{"web_read", fake("web_read"), `{}`, "web_read", same([4]Decision{P, P, A, A}), same([4]Decision{P, P, A, A})},
		{"file_write", fake("file_write"), `{}`, "file_write", same([4]Decision{B, P, A, A}), same([4]Decision{B, P, A, A})},
		{"network_send", fake("network_send"), `{}`, "network_send", same([4]Decision{B, P, A, A}), same([4]Decision{B, P, A, A})},
		{"browser", fake("browser"), `{}`, "browser", same([4]Decision{B, P, P, A}), same([4]Decision{B, P, P, A})},
		{"computer_use", fake("computer_use"), `{}`, "computer_use", same([4]Decision{B, P, P, A}), same([4]Decision{B, P, P, A})},
		{"custom_tool", fake("custom_tool"), `{}`, "custom_tool", same([4]Decision{P, A, A, A}), same([4]Decision{P, A, A, A})},
		{"subagent", fake("subagent"), `{}`, "subagent", same([4]Decision{A, P, A, A}), same([4]Decision{A, P, A, A})},
		{"Bash shell_safe", bash, `{"command":"ls -la"}`, "shell_safe",
			[4]cell{{A, off, false}, {A, off, false}, {A, off, false}, {A, off, false}},
			[4]cell{{A, ro, false}, {A, ww, false}, {A, ww, false}, {A, off, false}}},
		{"Bash shell_unsafe", bash, `{"command":"make -j4"}`, "shell_unsafe",
			[4]cell{{B, off, false}, {P, off, false}, {P, off, false}, {A, off, false}},
			[4]cell{{B, ro, false}, {P, ww, false}, {A, ww, false}, {A, off, false}}},
		shellRow("Bash fs_destructive", "rm -rf build", "fs_destructive"),
		shellRow("Bash git_destructive", "git push --force", "git_destructive"),
		shellRow("Bash privileged", "sudo reboot", "privileged"),
		{"Bash shell_unsafe leaving the sandbox", bash, `{"command":"make -j4","sandbox":false}`, "shell_unsafe",
			[4]cell{{B, off, false}, {P, off, false}, {P, off, false}, {A, off, false}},
			[4]cell{{B, ro, false}, {P, off, true}, {P, off, true}, {A, off, false}}},
		{"Bash shell_safe leaving the sandbox", bash, `{"command":"ls -la","sandbox":false}`, "shell_safe",
			[4]cell{{A, off, false}, {A, off, false}, {A, off, false}, {A, off, false}},
			[4]cell{{B, ro, false}, {P, off, true}, {P, off, true}, {A, off, false}}},
	}
	covered := map[string]bool{}
	for _, r := range rows {
		covered[r.cat] = true
	}
	for _, cat := range protocol.ToolCategories {
		if !covered[cat] {
			t.Errorf("category %s has no row", cat)
		}
	}
	for _, r := range rows {
		for mi, mode := range Modes {
			for _, available := range []bool{false, true} {
				for _, ruleEffect := range []string{"", RuleAllow, RuleDeny} {
					name := fmt.Sprintf("%s/%s/sandbox=%v/rule=%s", r.name, mode, available, ruleEffect)
					t.Run(name, func(t *testing.T) {
						want := r.without[mi]
						if available {
							want = r.with[mi]
						}
						var rules []Rule
						if ruleEffect != "" {
							rule, err := ParseRule(ruleEffect, "category:"+r.cat)
							if err != nil {
								t.Fatal(err)
							}
							rules = []Rule{rule}
							// A rule decides before the matrix: a deny
							// refuses the call; an allow runs it, except
							// that leaving the sandbox is never a rule's
							// to approve (a person is asked, explore
							// refuses).
							leaves := available && strings.Contains(r.args, `"sandbox":false`)
							switch {
							case ruleEffect == RuleDeny:
								want.d, want.esc = Block, false
							case !leaves:
								want.d, want.esc = Allow, false
								if strings.Contains(r.args, `"sandbox":false`) {
									want.box = off
								}
							}
						}
						v := NewEngine(Policy{Mode: mode, Rules: rules, Sandbox: sandbox.WorkspaceWrite, SandboxAvailable: available}).
							Evaluate(r.tool, json.RawMessage(r.args))
						if v.Decision != want.d {
							t.Errorf("decision %s, want %s (%s)", v.Decision, want.d, v.Explanation)
						}
						if v.Decision != Block && v.Sandbox != want.box {
							t.Errorf("sandbox %q, want %q", v.Sandbox, want.box)
						}
						if v.Escalation != want.esc {
							t.Errorf("escalation %v, want %v", v.Escalation, want.esc)
						}
						if v.Escalation && v.RememberAllowed {
							t.Error("leaving the sandbox may be remembered for the turn")
						}
						if v.Decision == Block && v.Explanation == "" {
							t.Error("a refusal without an explanation")
						}
					})
				}
			}
		}
	}
}
