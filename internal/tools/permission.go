package tools

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/maka-agent/maka/internal/bashcategory"
	"github.com/maka-agent/maka/internal/sandbox"
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
	protocol.ToolCategoryShellSafe:      {Allow, Allow, Allow, Allow},
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
// mode as ask. It is the matrix without a sandbox: shell_unsafe prompts in
// execute mode; Engine.Evaluate allows it there when the call runs
// sandboxed. shell_safe (a read-only command, see BashCategory) runs in
// every mode, which the original host never reached.
func MatrixDecision(mode Mode, category string) Decision {
	row, ok := permissionMatrix[category]
	if !ok {
		row = permissionMatrix[protocol.ToolCategoryCustomTool]
	}
	return row[modeIndex(mode)]
}

// Categorizer is implemented by tools that classify their own calls; the
// result overrides the category derived from the tool name.
type Categorizer interface {
	Category(args json.RawMessage) string
}

// AlwaysPrompt is implemented by tools whose every call needs a person's
// approval in every mode but bypass unless a rule allows it, whatever the
// matrix says of their category (MCP server tools: programs the user
// configured, gated like Bash).
type AlwaysPrompt interface {
	PromptBelowBypass() bool
}

// ServerHinted is implemented by tools whose provider claims whether they
// only read (an MCP tool's readOnlyHint). The claim is shown in the
// approval review and never decides anything.
type ServerHinted interface {
	ReadOnlyHint() bool
}

// CategoryOf returns the permission category of a call: Read, Grep and
// Glob read; WebFetch and WebSearch web_read; Write, Edit and patch tools
// file_write; Bash as classified by BashCategory; WriteStdin
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
	case NameWebFetch, "WebSearch":
		return protocol.ToolCategoryWebRead
	case NameWrite, NameEdit, "ApplyPatch", "apply_patch":
		return protocol.ToolCategoryFileWrite
	case NameBash:
		return BashCategory(stringArg(args, "command"))
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

// ScopeKey identifies what a "remember for this turn" approval covers:
// "<category>:<Tool>:<path>" for Read, Write and Edit (that one path,
// cleaned), "<category>:Bash:<sha256 of the canonical command>" (that one
// command, whole), "browser" for every browser tool, else
// "<category>:<Tool>:<sha256 of the arguments as sorted JSON>" (that one
// call). A key never holds a prefix of what was approved, so an approval
// can never cover a longer command or other arguments.
func ScopeKey(category string, tool Tool, args json.RawMessage) string {
	name := tool.Name()
	switch {
	case name == NameRead || name == NameWrite || name == NameEdit:
		return category + ":" + name + ":" + cleanArgPath(stringArg(args, "path"))
	case name == NameBash:
		return category + ":" + name + ":" + digest(CanonicalCommand(stringArg(args, "command")))
	case category == protocol.ToolCategoryBrowser:
		return protocol.ToolCategoryBrowser
	}
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	return category + ":" + name + ":" + digest(string(CanonicalJSON(args)))
}

// digest is the hex SHA-256 of s.
func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
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
	// Sandbox is how the call's processes are confined once it runs (Bash
	// only; Off for other tools).
	Sandbox sandbox.Mode
	// Escalation marks a Bash call that asked to run outside the sandbox
	// it would otherwise run in: its prompt is a sandbox_escalation prompt
	// (allow once or deny).
	Escalation bool
	// Explanation says, for a Block, why and what would allow the call.
	Explanation string
	// Hidden are the paths the deny Read rules name outright, which a
	// sandboxed Bash call may not reach either.
	Hidden []string
}

// Policy is what decides a session's calls: its permission mode, its rules
// (the root's defaults and the session's own, in any order: deny rules are
// decided first), and its sandbox.
type Policy struct {
	Mode  Mode
	Rules []Rule
	// Workspace is the session workspace; path rules are relative to it.
	Workspace string
	// Sandbox is the session's sandbox mode for Bash calls.
	Sandbox sandbox.Mode
	// SandboxAvailable reports whether this machine can enforce a sandbox
	// (sandbox.Status); without one every Bash call runs unconfined and
	// execute mode prompts for commands.
	SandboxAvailable bool
	// Protected are the host's own paths (Env.Protected): without a
	// sandbox, a read-only command that could reach them is not safe.
	Protected []string
}

// Engine decides whether tool calls may run under a policy, and remembers
// the scopes approved for the rest of a turn. Create one per turn; it is
// safe for concurrent use.
type Engine struct {
	p    Policy
	root string // the workspace's real path
	// denied are the paths deny Read rules name outright (absolute).
	denied []string

	mu         sync.Mutex
	remembered map[string]struct{}
}

// NewEngine returns an engine for one turn. An unknown mode is treated as
// ask.
func NewEngine(p Policy) *Engine {
	p.Rules = append([]Rule(nil), p.Rules...)
	e := &Engine{p: p, remembered: map[string]struct{}{}}
	if p.Workspace != "" {
		if root, err := filepath.EvalSymlinks(p.Workspace); err == nil {
			e.root = root
		}
	}
	for _, r := range p.Rules {
		if path, ok := ruleHiddenPath(r, p.Workspace); ok {
			e.denied = append(e.denied, path)
		}
	}
	return e
}

// callSandbox is the sandbox a Bash call of the policy runs in: read-only
// in explore, the session's sandbox in ask and execute, none in bypass or
// where the machine cannot enforce one.
func (e *Engine) callSandbox() sandbox.Mode {
	switch {
	case !e.p.SandboxAvailable || e.p.Mode == ModeBypass:
		return sandbox.Off
	case e.p.Mode == ModeExplore:
		return sandbox.ReadOnly
	case e.p.Sandbox == "":
		return sandbox.WorkspaceWrite
	}
	return e.p.Sandbox
}

// BashSandbox is the sandbox the policy's Bash calls run in (sandbox.Off:
// none is in force).
func (e *Engine) BashSandbox() sandbox.Mode { return e.callSandbox() }

// Evaluate decides a call. Deny rules win over allow rules; then a tool
// that needs no permission is allowed; then the permission matrix decides,
// with the sandbox: a Bash call that runs sandboxed needs no prompt in
// execute mode, and one that asks to leave the sandbox prompts for that
// (and is refused in explore); a prompt for a remembered scope key is
// allowed.
func (e *Engine) Evaluate(tool Tool, args json.RawMessage) Verdict {
	cat := CategoryOf(tool, args)
	name := tool.Name()
	v := Verdict{
		Category:        cat,
		Reason:          protocol.PermissionReasonForCategory(cat),
		ScopeKey:        ScopeKey(cat, tool, args),
		RememberAllowed: name != toolWriteStdin && cat != protocol.ToolCategoryComputerUse,
		Sandbox:         sandbox.Off,
	}
	escalate, unconfinedWhy := false, ""
	if name == NameBash {
		v.Sandbox = e.callSandbox()
		if v.Sandbox != sandbox.Off {
			v.Hidden = e.denied
		}
		if cat == protocol.ToolCategoryShellSafe && v.Sandbox == sandbox.Off && e.p.Mode != ModeBypass &&
			!e.safeUnsandboxed(stringArg(args, "command")) {
			// Nothing contains the command: it is read-only only if it
			// cannot reach what the host hides and does not run what a
			// file the model may write names.
			cat = bashcategory.Categorize(stringArg(args, "command"))
			v.Category, v.Reason = cat, protocol.PermissionReasonForCategory(cat)
			v.ScopeKey = ScopeKey(cat, tool, args)
			unconfinedWhy = "read-only, but nothing sandboxes commands here and it could reach outside the workspace, the host's files, a path a rule denies, or what a git config names"
		}
		if boolArg(args, "sandbox") == argFalse && v.Sandbox != sandbox.Off {
			escalate = true
		}
	}
	m := matchContext{tool: name, category: cat, args: args, workspace: e.p.Workspace, root: e.root}
	for _, effect := range []string{RuleDeny, RuleAllow} {
		for i := range e.p.Rules {
			r := e.p.Rules[i]
			if r.Effect == effect && ruleMatches(r, m) {
				v.Rule = &r
				if effect == RuleDeny {
					v.Decision = Block
					v.Explanation = fmt.Sprintf("the rule deny %s refuses it", r)
					return v
				}
				if escalate {
					// A rule approves the command, not leaving the
					// sandbox: only a person approves that.
					v.Rule = nil
					break
				}
				v.Decision = Allow
				return v
			}
		}
	}
	if escalate {
		if e.p.Mode == ModeExplore {
			v.Decision = Block
			v.Explanation = "explore mode runs commands read-only in the sandbox and never outside it; ask or execute mode would ask you"
			return v
		}
		// Leaving the sandbox is approved once, for this call alone.
		v.Decision, v.Escalation, v.RememberAllowed, v.Sandbox = Prompt, true, false, sandbox.Off
		if cat == protocol.ToolCategoryShellSafe {
			v.Category = bashcategory.Categorize(stringArg(args, "command"))
			v.Reason = protocol.PermissionReasonForCategory(v.Category)
		}
		return v
	}
	if !tool.PermissionRequired() {
		v.Decision = Allow
		return v
	}
	v.Decision = MatrixDecision(e.p.Mode, cat)
	if ap, ok := tool.(AlwaysPrompt); ok && ap.PromptBelowBypass() && v.Decision == Allow && e.p.Mode != ModeBypass {
		v.Decision = Prompt
	}
	if v.Decision == Prompt && cat == protocol.ToolCategoryShellUnsafe && e.p.Mode == ModeExecute && v.Sandbox != sandbox.Off {
		v.Decision = Allow
	}
	if v.Decision == Prompt && e.isRemembered(v.ScopeKey) {
		v.Decision = Allow
	}
	if v.Decision == Block {
		v.Explanation = explainBlock(e.p.Mode, cat, name, args, unconfinedWhy)
	}
	return v
}

// explainBlock says why the matrix refuses a call in mode and which mode
// would let it run; why, when set, is why a command is not read-only here.
func explainBlock(mode Mode, category, tool string, args json.RawMessage, why string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s mode does not run %s calls", mode, category)
	if tool == NameBash && why == "" {
		why = ShellUnsafeReason(stringArg(args, "command"))
	}
	if why != "" {
		fmt.Fprintf(&b, " (%s)", why)
	}
	for _, m := range Modes[modeIndex(mode)+1:] {
		switch MatrixDecision(m, category) {
		case Prompt:
			fmt.Fprintf(&b, "; %s mode would ask for approval", m)
			return b.String()
		case Allow:
			fmt.Fprintf(&b, "; %s mode would run it", m)
			return b.String()
		}
	}
	return b.String()
}

// DenyRead returns what Env.DenyRead asks: whether a deny Read rule names
// a workspace-relative path, so that Glob and Grep walks skip it. It is
// nil when no such rule exists.
func (e *Engine) DenyRead() func(rel string) bool {
	var deny []Rule
	for _, r := range e.p.Rules {
		if r.Effect == RuleDeny && r.Kind == RuleKindPath && r.Tool == NameRead {
			deny = append(deny, r)
		}
	}
	if len(deny) == 0 {
		return nil
	}
	ws := e.p.Workspace
	return func(rel string) bool {
		rel = path.Clean(filepath.ToSlash(rel))
		abs := filepath.ToSlash(filepath.Join(ws, rel))
		for _, r := range deny {
			p := rel
			if strings.HasPrefix(r.Value, "/") {
				p = abs
			}
			if ruleMatchPath(r, p) {
				return true
			}
		}
		return false
	}
}

// WebFetchDecision decides a WebFetch of rawURL as Evaluate decides a call
// (a redirect target of a call being run): why explains a Block.
func (e *Engine) WebFetchDecision(rawURL string) (Decision, string) {
	args, err := json.Marshal(map[string]string{"url": rawURL})
	if err != nil {
		return Block, "the URL cannot be encoded"
	}
	v := e.Evaluate(webFetchTool{}, args)
	return v.Decision, v.Explanation
}

// PrivateHostAllowed reports whether an allow WebFetch(domain:host) rule
// names host (in normHost form) and no deny rule of that form does: only
// then may WebFetch connect to it at a non-public address. No mode, no
// approval and no broader rule (WebFetch, category:web_read) allows that.
func (e *Engine) PrivateHostAllowed(host string) bool {
	allowed := false
	for _, r := range e.p.Rules {
		if r.Kind != RuleKindDomain || r.Value != host {
			continue
		}
		if r.Effect == RuleDeny {
			return false
		}
		allowed = true
	}
	return allowed
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

// boolArg values.
const (
	argAbsent = iota
	argFalse
	argTrue
)

// boolArg reads the boolean argument key of a JSON object: argAbsent when
// it is missing or not a boolean.
func boolArg(args json.RawMessage, key string) int {
	var m map[string]json.RawMessage
	if json.Unmarshal(args, &m) != nil {
		return argAbsent
	}
	var b bool
	if json.Unmarshal(m[key], &b) != nil {
		return argAbsent
	}
	if b {
		return argTrue
	}
	return argFalse
}
