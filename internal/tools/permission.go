package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/maka-agent/maka/protocol"
)

// Mode is a session permission mode, from least to most permissive:
// explore, ask, execute, bypass.
type Mode string

// Permission modes.
const (
	ModeExplore Mode = "explore"
	ModeAsk     Mode = "ask"
	ModeExecute Mode = "execute"
	ModeBypass  Mode = "bypass"
)

// Modes lists the permission modes from least to most permissive.
var Modes = []Mode{ModeExplore, ModeAsk, ModeExecute, ModeBypass}

// ParseMode parses a permission mode name (case-insensitive, surrounding
// whitespace ignored).
func ParseMode(s string) (Mode, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	for _, m := range Modes {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("unknown permission mode %q (want explore, ask, execute or bypass)", s)
}

// modeIndex is the column of a mode in the permission matrix; an unknown
// mode is treated as ask.
func modeIndex(m Mode) int {
	for i, x := range Modes {
		if x == m {
			return i
		}
	}
	return 1
}

// Decision is the outcome of a permission evaluation.
type Decision string

// Decisions.
const (
	// Allow runs the call.
	Allow Decision = "allow"
	// Block refuses the call without asking.
	Block Decision = "block"
	// Prompt asks for approval before running the call.
	Prompt Decision = "prompt"
)

// permissionMatrix holds the decision of each category per mode, in the
// order of Modes.
var permissionMatrix = map[string][4]Decision{
	protocol.ToolCategoryRead:           {Allow, Allow, Allow, Allow},
	protocol.ToolCategoryWebRead:        {Prompt, Prompt, Allow, Allow},
	protocol.ToolCategoryFileWrite:      {Block, Prompt, Allow, Allow},
	protocol.ToolCategoryShellSafe:      {Block, Prompt, Prompt, Allow},
	protocol.ToolCategoryShellUnsafe:    {Block, Prompt, Prompt, Allow},
	protocol.ToolCategoryFSDestructive:  {Block, Prompt, Prompt, Allow},
	protocol.ToolCategoryGitDestructive: {Block, Prompt, Prompt, Allow},
	protocol.ToolCategoryPrivileged:     {Block, Prompt, Prompt, Allow},
	protocol.ToolCategoryNetworkSend:    {Block, Prompt, Allow, Allow},
	protocol.ToolCategoryBrowser:        {Block, Prompt, Prompt, Allow},
	protocol.ToolCategoryComputerUse:    {Block, Prompt, Prompt, Allow},
	protocol.ToolCategoryCustomTool:     {Prompt, Allow, Allow, Allow},
	protocol.ToolCategorySubagent:       {Allow, Prompt, Allow, Allow},
}

// MatrixDecision is the decision of the permission matrix for a category
// in a mode; an unknown category is treated as custom_tool and an unknown
// mode as ask. Shell categories prompt in execute mode because no platform
// sandbox enforces their effects.
func MatrixDecision(mode Mode, category string) Decision {
	row, ok := permissionMatrix[category]
	if !ok {
		row = permissionMatrix[protocol.ToolCategoryCustomTool]
	}
	return row[modeIndex(mode)]
}

// Rule effects and kinds.
const (
	RuleAllow = "allow"
	RuleDeny  = "deny"

	RuleKindTool      = "tool"
	RuleKindCategory  = "category"
	RuleKindBashExact = "bash_exact"
)

// Rule is a user permission rule. Kind tool matches a tool by name
// (case-insensitive), category a tool category, bash_exact a Bash call whose
// whitespace-collapsed command equals Value.
type Rule struct {
	Effect string // RuleAllow or RuleDeny
	Kind   string // RuleKindTool, RuleKindCategory or RuleKindBashExact
	Value  string
}

// String renders the rule in ParseRule syntax.
func (r Rule) String() string {
	switch r.Kind {
	case RuleKindCategory:
		return "category:" + r.Value
	case RuleKindBashExact:
		return NameBash + "(" + r.Value + ")"
	}
	return r.Value
}

// ParseRule parses a rule given on the command line: "Read" (a tool by
// name), "Bash(git status)" (an exact Bash command, compared with runs of
// whitespace collapsed) or "category:file_write". effect is "allow" or
// "deny".
func ParseRule(effect, s string) (Rule, error) {
	effect = strings.ToLower(strings.TrimSpace(effect))
	if effect != RuleAllow && effect != RuleDeny {
		return Rule{}, fmt.Errorf("rule effect must be allow or deny, got %q", effect)
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return Rule{}, fmt.Errorf("empty permission rule")
	}
	if cat, ok := strings.CutPrefix(s, "category:"); ok {
		cat = strings.TrimSpace(cat)
		if _, known := permissionMatrix[cat]; !known {
			return Rule{}, fmt.Errorf("unknown tool category %q in rule %q", cat, s)
		}
		return Rule{Effect: effect, Kind: RuleKindCategory, Value: cat}, nil
	}
	if open := strings.IndexByte(s, '('); open >= 0 {
		name := strings.TrimSpace(s[:open])
		if !strings.HasSuffix(s, ")") {
			return Rule{}, fmt.Errorf("rule %q: missing closing parenthesis", s)
		}
		if !strings.EqualFold(name, NameBash) {
			return Rule{}, fmt.Errorf("rule %q: only Bash(...) rules take an argument", s)
		}
		cmd := collapseSpaces(s[open+1 : len(s)-1])
		if cmd == "" {
			return Rule{}, fmt.Errorf("rule %q: empty command", s)
		}
		return Rule{Effect: effect, Kind: RuleKindBashExact, Value: cmd}, nil
	}
	if strings.ContainsAny(s, " \t\n:)") {
		return Rule{}, fmt.Errorf("rule %q: a tool name has no spaces, colons or parentheses", s)
	}
	return Rule{Effect: effect, Kind: RuleKindTool, Value: s}, nil
}

// collapseSpaces trims s and replaces every run of whitespace with one
// space.
func collapseSpaces(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// Categorizer is implemented by tools that classify their own calls; the
// result overrides the category derived from the tool name.
type Categorizer interface {
	Category(args json.RawMessage) string
}

// CategoryOf returns the permission category of a call: Read, Grep and
// Glob read; WebFetch and WebSearch web_read; Write, Edit and patch tools
// file_write; Bash as classified by protocol.CategorizeBash; WriteStdin
// shell_unsafe; browser_* tools browser; anything else custom_tool, unless
// the tool implements Categorizer.
func CategoryOf(tool Tool, args json.RawMessage) string {
	if c, ok := tool.(Categorizer); ok {
		if cat := c.Category(args); cat != "" {
			return cat
		}
	}
	switch name := tool.Name(); name {
	case NameRead, NameGrep, NameGlob:
		return protocol.ToolCategoryRead
	case "WebFetch", "WebSearch":
		return protocol.ToolCategoryWebRead
	case NameWrite, NameEdit, "ApplyPatch", "apply_patch":
		return protocol.ToolCategoryFileWrite
	case NameBash:
		return protocol.CategorizeBash(stringArg(args, "command"))
	case toolWriteStdin:
		return protocol.ToolCategoryShellUnsafe
	default:
		if strings.HasPrefix(name, "browser_") {
			return protocol.ToolCategoryBrowser
		}
		return protocol.ToolCategoryCustomTool
	}
}

// toolWriteStdin is the tool that writes to a running command; a prompt for
// it may not be remembered.
const toolWriteStdin = "WriteStdin"

// Scope key bounds.
const (
	scopeMaxCommand = 512
	scopeMaxArgs    = 1024
)

// ScopeKey identifies what a "remember for this turn" approval covers:
// "<category>:<Tool>:<path>" for Read, Write and Edit,
// "<category>:Glob:<cwd>:<pattern>", "<category>:Grep:<path>:<glob>:<pattern>",
// "<category>:Bash:<command, whitespace-collapsed, at most 512 bytes>",
// "browser" for every browser tool, else "<category>:<Tool>:<arguments as
// sorted JSON, at most 1024 bytes>".
func ScopeKey(category string, tool Tool, args json.RawMessage) string {
	name := tool.Name()
	switch {
	case name == NameRead || name == NameWrite || name == NameEdit:
		return category + ":" + name + ":" + cleanArgPath(stringArg(args, "path"))
	case name == NameGlob:
		return category + ":" + name + ":" + cleanArgPath(stringArg(args, "cwd")) + ":" + stringArg(args, "pattern")
	case name == NameGrep:
		return category + ":" + name + ":" + cleanArgPath(stringArg(args, "path")) + ":" +
			stringArg(args, "glob") + ":" + stringArg(args, "pattern")
	case name == NameBash:
		return category + ":" + name + ":" + truncateBytes(collapseSpaces(stringArg(args, "command")), scopeMaxCommand)
	case category == protocol.ToolCategoryBrowser:
		return protocol.ToolCategoryBrowser
	}
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	return category + ":" + name + ":" + truncateBytes(string(CanonicalJSON(args)), scopeMaxArgs)
}

// cleanArgPath normalises a path argument for a scope key; an empty path
// means the workspace, ".".
func cleanArgPath(p string) string {
	if p == "" {
		return "."
	}
	return path.Clean(filepath.ToSlash(p))
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

// Verdict is the result of evaluating a call.
type Verdict struct {
	Decision Decision
	// Category is the call's tool category.
	Category string
	// Reason is the permission prompt reason for Category.
	Reason string
	// ScopeKey is what remembering an approval of this call covers.
	ScopeKey string
	// RememberAllowed reports whether a prompt for the call may offer
	// "remember for this turn".
	RememberAllowed bool
	// Rule is the rule that decided, if any.
	Rule *Rule
}

// Engine decides whether tool calls may run under a mode and rules, and
// remembers the scopes approved for the rest of a turn. Create one per
// turn; it is safe for concurrent use.
type Engine struct {
	mode  Mode
	rules []Rule

	mu         sync.Mutex
	remembered map[string]struct{}
}

// NewEngine returns an engine for one turn. An unknown mode is treated as
// ask.
func NewEngine(mode Mode, rules []Rule) *Engine {
	return &Engine{mode: mode, rules: append([]Rule(nil), rules...), remembered: map[string]struct{}{}}
}

// Mode returns the engine's permission mode.
func (e *Engine) Mode() Mode { return e.mode }

// Evaluate decides a call. Deny rules win over allow rules; then a tool
// that needs no permission is allowed; then the permission matrix decides,
// except that a prompt for a remembered scope key is allowed.
func (e *Engine) Evaluate(tool Tool, args json.RawMessage) Verdict {
	cat := CategoryOf(tool, args)
	v := Verdict{
		Category:        cat,
		Reason:          protocol.PermissionReasonForCategory(cat),
		ScopeKey:        ScopeKey(cat, tool, args),
		RememberAllowed: tool.Name() != toolWriteStdin && cat != protocol.ToolCategoryComputerUse,
	}
	for _, effect := range []string{RuleDeny, RuleAllow} {
		for i := range e.rules {
			r := e.rules[i]
			if r.Effect == effect && ruleMatches(r, tool, cat, args) {
				v.Decision = Block
				if effect == RuleAllow {
					v.Decision = Allow
				}
				v.Rule = &r
				return v
			}
		}
	}
	if !tool.PermissionRequired() {
		v.Decision = Allow
		return v
	}
	v.Decision = MatrixDecision(e.mode, cat)
	if v.Decision == Prompt && e.isRemembered(v.ScopeKey) {
		v.Decision = Allow
	}
	return v
}

func ruleMatches(r Rule, tool Tool, category string, args json.RawMessage) bool {
	switch r.Kind {
	case RuleKindTool:
		return strings.EqualFold(r.Value, tool.Name())
	case RuleKindCategory:
		return r.Value == category
	case RuleKindBashExact:
		return tool.Name() == NameBash && collapseSpaces(stringArg(args, "command")) == collapseSpaces(r.Value)
	}
	return false
}

// Remember allows prompts for scopeKey for the rest of the turn.
func (e *Engine) Remember(scopeKey string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.remembered[scopeKey] = struct{}{}
}

func (e *Engine) isRemembered(scopeKey string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.remembered[scopeKey]
	return ok
}
