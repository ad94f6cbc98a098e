package tools

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/maka-agent/maka/internal/sandbox"
	"github.com/maka-agent/maka/protocol"
)

func TestPermissionMatrix(t *testing.T) {
	const A, B, P = Allow, Block, Prompt
	// Columns: explore, ask, execute, bypass.
	want := map[string][4]Decision{
		"read":            {A, A, A, A},
		"web_read":        {P, P, A, A},
		"file_write":      {B, P, A, A},
		"fs_destructive":  {B, P, P, A},
		"shell_safe":      {A, A, A, A},
		"shell_unsafe":    {B, P, P, A},
		"git_destructive": {B, P, P, A},
		"network_send":    {B, P, A, A},
		"privileged":      {B, P, P, A},
		"browser":         {B, P, P, A},
		"computer_use":    {B, P, P, A},
		"custom_tool":     {P, A, A, A},
		"subagent":        {A, P, A, A},
	}
	if len(want) != len(protocol.ToolCategories) {
		t.Fatalf("table covers %d of %d categories", len(want), len(protocol.ToolCategories))
	}
	for _, cat := range protocol.ToolCategories {
		row, ok := want[cat]
		if !ok {
			t.Fatalf("category %s missing from the table", cat)
		}
		for i, mode := range Modes {
			t.Run(fmt.Sprintf("%s/%s", mode, cat), func(t *testing.T) {
				tool := categorizedTool{fakeTool{name: "Custom", perm: true, category: cat}}
				v := NewEngine(Policy{Mode: mode}).Evaluate(tool, json.RawMessage(`{"a":1}`))
				if v.Decision != row[i] || MatrixDecision(mode, cat) != row[i] {
					t.Errorf("decision %s, want %s", v.Decision, row[i])
				}
				if v.Category != cat || v.Reason != protocol.PermissionReasonForCategory(cat) || v.Rule != nil {
					t.Errorf("verdict %+v", v)
				}
			})
		}
	}
	if MatrixDecision(ModeExplore, "no_such_category") != Prompt || MatrixDecision("weird", protocol.ToolCategoryFileWrite) != Prompt {
		t.Error("unknown category/mode fallbacks")
	}
}

func TestBuiltinCategories(t *testing.T) {
	tests := []struct {
		tool     string
		args     string
		category string
		reason   string
		explore  Decision
		ask      Decision
		execute  Decision
	}{
		{NameRead, `{"path":"a"}`, "read", "custom", Allow, Allow, Allow},
		{NameGlob, `{"pattern":"*"}`, "read", "custom", Allow, Allow, Allow},
		{NameGrep, `{"pattern":"x"}`, "read", "custom", Allow, Allow, Allow},
		{NameWrite, `{"path":"a","content":""}`, "file_write", "file_write", Block, Prompt, Allow},
		{NameEdit, `{"path":"a","old_string":"x","new_string":"y"}`, "file_write", "file_write", Block, Prompt, Allow},
		{NameBash, `{"command":"make -j4"}`, "shell_unsafe", "shell_dangerous", Block, Prompt, Prompt},
		{NameBash, `{"command":"rm -rf build"}`, "fs_destructive", "fs_destructive", Block, Prompt, Prompt},
		{NameBash, `{"command":"git push --force"}`, "git_destructive", "git_destructive", Block, Prompt, Prompt},
		{NameBash, `{"command":"echo hi && sudo reboot"}`, "privileged", "privileged", Block, Prompt, Prompt},
		{NameBash, `{"command":42}`, "shell_unsafe", "shell_dangerous", Block, Prompt, Prompt},
	}
	for _, tt := range tests {
		t.Run(tt.tool+tt.args, func(t *testing.T) {
			tool := byName(t, tt.tool)
			for mode, want := range map[Mode]Decision{ModeExplore: tt.explore, ModeAsk: tt.ask, ModeExecute: tt.execute, ModeBypass: Allow} {
				v := NewEngine(Policy{Mode: mode}).Evaluate(tool, json.RawMessage(tt.args))
				if v.Decision != want || v.Category != tt.category || v.Reason != tt.reason {
					t.Errorf("%s: %+v, want %s %s %s", mode, v, want, tt.category, tt.reason)
				}
			}
		})
	}
	for name, cat := range map[string]string{
		"WebFetch": "web_read", "WebSearch": "web_read", "WriteStdin": "shell_unsafe",
		"browser_click": "browser", "apply_patch": "file_write", "mcp__x": "custom_tool",
	} {
		if got := CategoryOf(fakeTool{name: name}, nil); got != cat {
			t.Errorf("CategoryOf(%s) = %s, want %s", name, got, cat)
		}
	}
}

func TestRulePrecedence(t *testing.T) {
	rule := func(effect, s string) Rule {
		r, err := ParseRule(effect, s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	read, write, bash := byName(t, NameRead), byName(t, NameWrite), byName(t, NameBash)
	ws := newEnv(t).Workspace
	tests := []struct {
		name  string
		mode  Mode
		rules []Rule
		tool  Tool
		args  string
		want  Decision
		rule  string // the deciding rule, "" for none
	}{
		{"deny beats allow", ModeBypass, []Rule{rule("allow", "Write"), rule("deny", "write")}, write, `{"path":"a"}`, Block, "Write"},
		{"deny applies to tools needing no permission", ModeBypass, []Rule{rule("deny", "Read")}, read, `{"path":"a"}`, Block, "Read"},
		{"allow rule beats the matrix", ModeExplore, []Rule{rule("allow", "category:file_write")}, write, `{"path":"a"}`, Allow, "category:file_write"},
		{"bash exact allow, unquoted blanks folded", ModeExplore, []Rule{rule("allow", "Bash(make   build)")}, bash, `{"command":"  make build\n"}`, Allow, "Bash(make build)"},
		{"bash exact keeps quoted blanks", ModeAsk, []Rule{rule("allow", "Bash(make 'a  b')")}, bash, `{"command":"make 'a b'"}`, Prompt, ""},
		{"bash exact does not match more", ModeAsk, []Rule{rule("allow", "Bash(make build)")}, bash, `{"command":"make build; rm -rf /"}`, Prompt, ""},
		{"bash exact never matches a second line", ModeAsk, []Rule{rule("allow", "Bash(a b)")}, bash, `{"command":"a\nb"}`, Prompt, ""},
		{"bash prefix allows its command", ModeAsk, []Rule{rule("allow", "Bash(npm run test:*)")}, bash, `{"command":"npm run test -- --watch=false"}`, Allow, "Bash(npm run test:*)"},
		{"bash prefix needs a word boundary", ModeAsk, []Rule{rule("allow", "Bash(npm run test:*)")}, bash, `{"command":"npm run testx"}`, Prompt, ""},
		{"bash prefix never matches a chain", ModeAsk, []Rule{rule("allow", "Bash(npm run test:*)")}, bash, `{"command":"npm run test && curl x | sh"}`, Prompt, ""},
		{"bash prefix never matches a substitution", ModeAsk, []Rule{rule("allow", "Bash(npm run test:*)")}, bash, `{"command":"npm run test $(rm -rf ~)"}`, Prompt, ""},
		{"bash prefix never matches a newline", ModeAsk, []Rule{rule("allow", "Bash(npm run test:*)")}, bash, `{"command":"npm run test\nrm -rf ~"}`, Prompt, ""},
		{"path rule allows inside its glob", ModeAsk, []Rule{rule("allow", "Edit(docs/**)")}, write, `{"path":"docs/a/b.md"}`, Allow, "Edit(docs/**)"},
		{"path rule misses outside its glob", ModeAsk, []Rule{rule("allow", "Edit(docs/**)")}, write, `{"path":"docs/../src/a.go"}`, Prompt, ""},
		{"path deny rule on Read", ModeBypass, []Rule{rule("deny", "Read(secrets/**)")}, read, `{"path":"./secrets/k"}`, Block, "Read(secrets/**)"},
		{"Read rule covers Grep", ModeBypass, []Rule{rule("deny", "Read(secrets/**)")}, byName(t, NameGrep), `{"pattern":"x","path":"secrets"}`, Block, "Read(secrets/**)"},
		{"Write rule does not cover Read", ModeBypass, []Rule{rule("deny", "Write(**)")}, read, `{"path":"a"}`, Allow, ""},
		{"bash exact only for Bash", ModeAsk, []Rule{rule("allow", "Bash(a)")}, write, `{"path":"a","command":"a"}`, Prompt, ""},
		{"deny refined bash category", ModeBypass, []Rule{rule("deny", "category:fs_destructive")}, bash, `{"command":"rm x"}`, Block, "category:fs_destructive"},
		{"category deny misses other categories", ModeBypass, []Rule{rule("deny", "category:fs_destructive")}, bash, `{"command":"ls"}`, Allow, ""},
		{"deny bash exact beats allow tool", ModeBypass, []Rule{rule("allow", "Bash"), rule("deny", "Bash(make deploy)")}, bash, `{"command":"make  deploy"}`, Block, "Bash(make deploy)"},
		{"deny bash prefix", ModeBypass, []Rule{rule("deny", "Bash(git push:*)")}, bash, `{"command":"git push origin main"}`, Block, "Bash(git push:*)"},
		{"deny bash prefix inside a chain", ModeBypass, []Rule{rule("deny", "Bash(git push:*)")}, bash, `{"command":"make && /usr/bin/git  push -f"}`, Block, "Bash(git push:*)"},
		{"deny bash prefix inside a substitution", ModeBypass, []Rule{rule("deny", "Bash(git push:*)")}, bash, `{"command":"echo $(git push)"}`, Block, "Bash(git push:*)"},
		{"deny bash prefix needs whole words", ModeBypass, []Rule{rule("deny", "Bash(git push:*)")}, bash, `{"command":"legit pushover"}`, Allow, ""},
		{"deny bash exact inside a chain", ModeBypass, []Rule{rule("deny", "Bash(make deploy)")}, bash, `{"command":"make test; make deploy"}`, Block, "Bash(make deploy)"},
		{"deny bash exact needs whole words", ModeBypass, []Rule{rule("deny", "Bash(make deploy)")}, bash, `{"command":"make deploy-docs"}`, Allow, ""},
		{"no rules", ModeAsk, nil, write, `{"path":"a"}`, Prompt, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := NewEngine(Policy{Mode: tt.mode, Rules: tt.rules, Workspace: ws}).Evaluate(tt.tool, json.RawMessage(tt.args))
			if v.Decision != tt.want {
				t.Errorf("decision %s, want %s", v.Decision, tt.want)
			}
			switch {
			case tt.rule == "" && v.Rule != nil:
				t.Errorf("decided by rule %v", *v.Rule)
			case tt.rule != "" && (v.Rule == nil || v.Rule.String() != tt.rule):
				t.Errorf("rule %v, want %s", v.Rule, tt.rule)
			}
		})
	}
}

func TestParseRule(t *testing.T) {
	tests := []struct {
		effect, in string
		want       Rule
		err        string
	}{
		{"allow", "Read", Rule{Effect: RuleAllow, Kind: RuleKindTool, Tool: "Read", Value: ""}, ""},
		{"allow", "read", Rule{Effect: RuleAllow, Kind: RuleKindTool, Tool: "Read", Value: ""}, ""},
		{"allow", "mcp__github__create_issue", Rule{Effect: RuleAllow, Kind: RuleKindTool, Tool: "mcp__github__create_issue", Value: ""}, ""},
		{"DENY", " Bash( git  status ) ", Rule{Effect: RuleDeny, Kind: RuleKindBashExact, Tool: "Bash", Value: "git status"}, ""},
		{"allow", "bash(ls)", Rule{Effect: RuleAllow, Kind: RuleKindBashExact, Tool: "Bash", Value: "ls"}, ""},
		{"allow", "Bash(*)", Rule{Effect: RuleAllow, Kind: RuleKindTool, Tool: "Bash", Value: ""}, ""},
		{"allow", "Bash(npm run  test:*)", Rule{Effect: RuleAllow, Kind: RuleKindBashPrefix, Tool: "Bash", Value: "npm run test"}, ""},
		{"allow", "Bash(a; b:*)", Rule{}, "one simple command"},
		{"allow", "Read(src/**)", Rule{Effect: RuleAllow, Kind: RuleKindPath, Tool: "Read", Value: "src/**"}, ""},
		{"allow", "Edit(./docs/*.md)", Rule{Effect: RuleAllow, Kind: RuleKindPath, Tool: "Edit", Value: "docs/*.md"}, ""},
		{"allow", "Read(/etc/**)", Rule{Effect: RuleAllow, Kind: RuleKindPath, Tool: "Read", Value: "/etc/**"}, ""},
		{"deny", "Read(.//secrets/**)", Rule{Effect: RuleDeny, Kind: RuleKindPath, Tool: "Read", Value: "secrets/**"}, ""},
		{"allow", "Read([)", Rule{}, "invalid path glob"},
		{"allow", "category:file_write", Rule{Effect: RuleAllow, Kind: RuleKindCategory, Tool: "", Value: "file_write"}, ""},
		{"allow", "category:nope", Rule{}, "unknown tool category"},
		{"allow", "Bash()", Rule{}, "empty command"},
		{"allow", "Bash(ls", Rule{}, "closing parenthesis"},
		{"allow", "WebFetch(x)", Rule{}, "WebFetch(domain:example.com)"},
		{"allow", "WebSearch(x)", Rule{}, "only Bash"},
		{"allow", "", Rule{}, "empty"},
		{"allow", "two words", Rule{}, "tool name"},
		{"maybe", "Read", Rule{}, "allow or deny"},
	}
	for _, tt := range tests {
		got, err := ParseRule(tt.effect, tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseRule(%q, %q) error %v, want %q", tt.effect, tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseRule(%q, %q) = %+v, %v", tt.effect, tt.in, got, err)
		}
		if again, err := ParseRule(tt.effect, got.String()); err != nil || again != got {
			t.Errorf("String() %q does not round-trip: %+v %v", got.String(), again, err)
		}
	}
}

func TestParseMode(t *testing.T) {
	for _, m := range Modes {
		if got, err := ParseMode(" " + strings.ToUpper(string(m))); err != nil || got != m {
			t.Errorf("ParseMode(%s) = %s, %v", m, got, err)
		}
	}
	if _, err := ParseMode("yolo"); err == nil {
		t.Error("ParseMode accepted yolo")
	}
}

func TestScopeKeys(t *testing.T) {
	hash := func(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }
	tests := []struct {
		tool Tool
		args string
		want string
	}{
		{byName(t, NameWrite), `{"path":"./a/../b.txt","content":"x"}`, "file_write:Write:b.txt"},
		{byName(t, NameRead), `{"path":"src/x.go"}`, "read:Read:src/x.go"},
		{byName(t, NameGlob), `{"pattern":"**/*.go"}`, "read:Glob:" + hash(`{"pattern":"**/*.go"}`)},
		{byName(t, NameBash), `{"command":"make   build\n"}`, "shell_unsafe:Bash:" + hash("make build")},
		{fakeTool{name: "browser_click", perm: true}, `{"x":1}`, "browser"},
		{fakeTool{name: "mcp", perm: true}, `{"b":1,"a":[2]}`, "custom_tool:mcp:" + hash(`{"a":[2],"b":1}`)},
		{fakeTool{name: "mcp", perm: true}, ``, "custom_tool:mcp:" + hash(`{}`)},
	}
	for _, tt := range tests {
		v := NewEngine(Policy{Mode: ModeAsk}).Evaluate(tt.tool, json.RawMessage(tt.args))
		if v.ScopeKey != tt.want {
			t.Errorf("%s %s: scope %q, want %q", tt.tool.Name(), tt.args, v.ScopeKey, tt.want)
		}
	}
}

// TestRememberedApprovalIsExact approves a long command for the rest of the
// turn and tries what shares a prefix with it, or differs only in blanks
// the shell reads as separators.
func TestRememberedApprovalIsExact(t *testing.T) {
	bash := byName(t, NameBash)
	e := NewEngine(Policy{Mode: ModeAsk})
	cmd := func(c string) json.RawMessage { b, _ := json.Marshal(map[string]string{"command": c}); return b }
	long := "echo " + strings.Repeat("Z", 600) + " | tee /dev/null"
	approved := e.Evaluate(bash, cmd(long+" && echo first"))
	if approved.Decision != Prompt || !approved.RememberAllowed {
		t.Fatalf("first call: %+v", approved)
	}
	e.Remember(approved.ScopeKey)
	if v := e.Evaluate(bash, cmd(long+" && echo first")); v.Decision != Allow {
		t.Errorf("the approved command itself: %s", v.Decision)
	}
	for _, c := range []string{
		long + " ; touch /elsewhere",
		long + " && echo first; touch /elsewhere",
		long + " && echo first\ntouch /elsewhere",
		strings.Replace(long+" && echo first", " && ", "\n", 1),
	} {
		if v := e.Evaluate(bash, cmd(c)); v.Decision != Prompt {
			t.Errorf("%.40q…%q: %s, want a prompt", c, c[len(c)-24:], v.Decision)
		}
	}
	e.Remember(e.Evaluate(bash, cmd("a b")).ScopeKey)
	if v := e.Evaluate(bash, cmd("a\nb")); v.Decision != Prompt {
		t.Errorf("'a b' approved, 'a\\nb' ran: %s", v.Decision)
	}
	// custom tools prompt in explore mode.
	e = NewEngine(Policy{Mode: ModeExplore})
	other := e.Evaluate(fakeTool{name: "mcp", perm: true}, json.RawMessage(`{"a":"`+strings.Repeat("x", 2000)+`1"}`))
	if other.Decision != Prompt {
		t.Fatalf("custom tool in explore: %s", other.Decision)
	}
	e.Remember(other.ScopeKey)
	if v := e.Evaluate(fakeTool{name: "mcp", perm: true}, json.RawMessage(`{"a":"`+strings.Repeat("x", 2000)+`2"}`)); v.Decision != Prompt {
		t.Error("a remembered call covers another with the same first 2000 bytes")
	}
}

func TestRemember(t *testing.T) {
	write := byName(t, NameWrite)
	e := NewEngine(Policy{Mode: ModeAsk})
	a := json.RawMessage(`{"path":"a.txt","content":"1"}`)
	v := e.Evaluate(write, a)
	if v.Decision != Prompt || !v.RememberAllowed {
		t.Fatalf("%+v", v)
	}
	e.Remember(v.ScopeKey)
	if got := e.Evaluate(write, json.RawMessage(`{"path":"a.txt","content":"2"}`)); got.Decision != Allow {
		t.Errorf("remembered scope still %s", got.Decision)
	}
	if got := e.Evaluate(write, json.RawMessage(`{"path":"b.txt","content":"1"}`)); got.Decision != Prompt {
		t.Errorf("other path %s", got.Decision)
	}
	if got := NewEngine(Policy{Mode: ModeAsk}).Evaluate(write, a); got.Decision != Prompt {
		t.Error("memory leaked into a new engine")
	}
	// Remembering never turns a block into an allow.
	ex := NewEngine(Policy{Mode: ModeExplore})
	ex.Remember(v.ScopeKey)
	if got := ex.Evaluate(write, a); got.Decision != Block {
		t.Errorf("explore after remember: %s", got.Decision)
	}
	// A deny rule wins over a remembered scope.
	deny, _ := ParseRule("deny", "Write")
	dn := NewEngine(Policy{Mode: ModeAsk, Rules: []Rule{deny}})
	dn.Remember(v.ScopeKey)
	if got := dn.Evaluate(write, a); got.Decision != Block {
		t.Errorf("deny after remember: %s", got.Decision)
	}
	if v := e.Evaluate(fakeTool{name: "WriteStdin", perm: true}, nil); v.RememberAllowed {
		t.Error("WriteStdin may be remembered")
	}
	if v := e.Evaluate(categorizedTool{fakeTool{name: "screen", perm: true, category: "computer_use"}}, nil); v.RememberAllowed {
		t.Error("computer_use may be remembered")
	}
}

func TestEngineConcurrent(t *testing.T) {
	e := NewEngine(Policy{Mode: ModeAsk})
	bash := byName(t, NameBash)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := json.RawMessage(fmt.Sprintf(`{"command":"echo %d"}`, i))
			v := e.Evaluate(bash, args)
			e.Remember(v.ScopeKey)
			if got := e.Evaluate(bash, args); got.Decision != Allow {
				t.Errorf("after remember: %s", got.Decision)
			}
		}()
	}
	wg.Wait()
}

// TestGitIsNotSafeWhereWritesAreUnprompted: in execute mode without a
// sandbox a model may write .git/config unasked, and git runs what that
// file names (core.fsmonitor), so git commands prompt there; elsewhere a
// read-only git command runs.
func TestGitIsNotSafeWhereWritesAreUnprompted(t *testing.T) {
	bash := byName(t, NameBash)
	args := json.RawMessage(`{"command":"git status"}`)
	for _, tc := range []struct {
		mode      Mode
		available bool
		want      Decision
		category  string
	}{
		{ModeExecute, false, Prompt, "shell_unsafe"},
		{ModeExecute, true, Allow, "shell_safe"},
		{ModeAsk, false, Allow, "shell_safe"},
		{ModeExplore, false, Allow, "shell_safe"},
	} {
		v := NewEngine(Policy{Mode: tc.mode, SandboxAvailable: tc.available}).Evaluate(bash, args)
		if v.Decision != tc.want || v.Category != tc.category {
			t.Errorf("%s sandbox=%v: %s %s, want %s %s", tc.mode, tc.available, v.Decision, v.Category, tc.want, tc.category)
		}
	}
	if v := NewEngine(Policy{Mode: ModeExecute}).Evaluate(bash, json.RawMessage(`{"command":"ls -la"}`)); v.Decision != Allow {
		t.Errorf("ls in execute without a sandbox: %s", v.Decision)
	}
}

// TestReadOnlyWithoutSandboxStaysInTheWorkspace: where nothing sandboxes a
// command, a read-only command is safe only if it names nothing outside
// the workspace and the workspace holds none of the host's files; the
// same commands run sandboxed where Landlock is.
func TestReadOnlyWithoutSandboxStaysInTheWorkspace(t *testing.T) {
	bash := byName(t, NameBash)
	ws := newEnv(t).Workspace
	cmd := func(c string) json.RawMessage { b, _ := json.Marshal(map[string]string{"command": c}); return b }
	for _, tc := range []struct {
		command   string
		protected []string
		safe      bool
	}{
		{"cat notes.txt | wc -l", nil, true},
		{"grep -rn TODO src", []string{"/elsewhere/root"}, true},
		{"cat /etc/passwd", nil, false},
		{"cat ../other/secret", nil, false},
		{"cat ~/.ssh/id_rsa", nil, false},
		{"rg --files '/home'", nil, false},
		{"grep -rn api_key .", []string{ws + "/.config/Maka"}, false},
		{"ls", []string{filepath.Dir(ws)}, false},
	} {
		for _, mode := range []Mode{ModeExplore, ModeAsk} {
			e := NewEngine(Policy{Mode: mode, Workspace: ws, Protected: tc.protected})
			v := e.Evaluate(bash, cmd(tc.command))
			if safe := v.Decision == Allow; safe != tc.safe {
				t.Errorf("%s %q without a sandbox: %s %s, want safe=%v", mode, tc.command, v.Decision, v.Category, tc.safe)
			}
			sandboxed := NewEngine(Policy{Mode: mode, Workspace: ws, Protected: tc.protected, SandboxAvailable: true}).Evaluate(bash, cmd(tc.command))
			if sandboxed.Decision != Allow || sandboxed.Sandbox == sandbox.Off {
				t.Errorf("%s %q in the sandbox: %s in %q", mode, tc.command, sandboxed.Decision, sandboxed.Sandbox)
			}
		}
	}
}

// TestPathRulesSeeThroughLinks: an allow rule covers a path only where its
// real location matches too, for files yet to be written under a linked
// directory as well; a deny rule refuses a link to what it names.
func TestPathRulesSeeThroughLinks(t *testing.T) {
	ws := newEnv(t).Workspace
	for _, d := range []string{"docs", "src"} {
		if err := os.Mkdir(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../src", filepath.Join(ws, "docs", "new")); err != nil {
		t.Fatal(err)
	}
	allow, _ := ParseRule(RuleAllow, "Edit(docs/**)")
	deny, _ := ParseRule(RuleDeny, "Read(src/**)")
	e := NewEngine(Policy{Mode: ModeAsk, Workspace: ws, Rules: []Rule{allow, deny}})
	if v := e.Evaluate(byName(t, NameWrite), json.RawMessage(`{"path":"docs/new/sub/x.md","content":""}`)); v.Decision != Prompt {
		t.Errorf("Write through docs/new (a link to src) into a new directory: %s", v.Decision)
	}
	if v := e.Evaluate(byName(t, NameWrite), json.RawMessage(`{"path":"docs/sub/x.md","content":""}`)); v.Decision != Allow {
		t.Errorf("Write under docs: %s", v.Decision)
	}
	if v := e.Evaluate(byName(t, NameRead), json.RawMessage(`{"path":"docs/new/a.go"}`)); v.Decision != Block {
		t.Errorf("Read of src through the link: %s", v.Decision)
	}
}

// TestCanonicalCommandNeverMergesDifferentCommands: blanks inside quotes,
// substitutions or ANSI-C strings are never folded.
func TestCanonicalCommandNeverMergesDifferentCommands(t *testing.T) {
	for _, pair := range [][2]string{
		{`echo "$(echo "a  b")"`, `echo "$(echo "a b")"`},
		{`echo $'\'  rm'`, `echo $'\' rm'`},
		{`echo 'a  b'`, `echo 'a b'`},
		{"echo a\\  b", "echo a\\ b"},
	} {
		if CanonicalCommand(pair[0]) == CanonicalCommand(pair[1]) {
			t.Errorf("%q and %q share a canonical form", pair[0], pair[1])
		}
	}
	if CanonicalCommand(" make   build\t-j4 ") != "make build -j4" {
		t.Errorf("plain blanks not folded: %q", CanonicalCommand(" make   build\t-j4 "))
	}
}

// TestDenyReadRulesReachCommands: what a deny Read rule names outright is
// hidden from a sandboxed command too, and without a sandbox a read-only
// command that names it asks.
func TestDenyReadRulesReachCommands(t *testing.T) {
	bash := byName(t, NameBash)
	ws := newEnv(t).Workspace
	deny, _ := ParseRule(RuleDeny, "Read(secrets/**)")
	pattern, _ := ParseRule(RuleDeny, "Read(**/*.pem)")
	args := json.RawMessage(`{"command":"cat secrets/token.txt"}`)
	v := NewEngine(Policy{Mode: ModeAsk, Workspace: ws, Rules: []Rule{deny, pattern}, SandboxAvailable: true}).Evaluate(bash, args)
	if v.Decision != Allow || v.Sandbox != sandbox.WorkspaceWrite || len(v.Hidden) != 1 || v.Hidden[0] != filepath.Join(ws, "secrets") {
		t.Errorf("sandboxed: %s in %q hiding %q", v.Decision, v.Sandbox, v.Hidden)
	}
	v = NewEngine(Policy{Mode: ModeAsk, Workspace: ws, Rules: []Rule{deny}}).Evaluate(bash, args)
	if v.Decision != Prompt {
		t.Errorf("without a sandbox: %s %s", v.Decision, v.Category)
	}
	if v := NewEngine(Policy{Mode: ModeAsk, Workspace: ws, Rules: []Rule{deny}}).Evaluate(bash, json.RawMessage(`{"command":"cat notes.txt"}`)); v.Decision != Allow {
		t.Errorf("another file without a sandbox: %s", v.Decision)
	}
}
