package tools

import (
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/bmatcuk/doublestar/v4"
)

// Rule effects and kinds.
const (
	RuleAllow = "allow"
	RuleDeny  = "deny"

	// RuleKindTool matches every call of a tool by name ("Read", "Bash",
	// "mcp__github__create_issue"), case-insensitively.
	RuleKindTool = "tool"
	// RuleKindCategory matches a permission category ("category:file_write").
	RuleKindCategory = "category"
	// RuleKindBashExact matches one exact Bash command ("Bash(go test ./...)").
	RuleKindBashExact = "bash_exact"
	// RuleKindBashPrefix matches a single simple Bash command that starts
	// with the given words ("Bash(npm run test:*)").
	RuleKindBashPrefix = "bash_prefix"
	// RuleKindPath matches the path argument of a file tool against a glob
	// ("Read(src/**)", "Edit(docs/*.md)", "Read(/etc/**)").
	RuleKindPath = "path"
	// RuleKindDomain matches WebFetch calls of URLs on one host
	// ("WebFetch(domain:example.com)", "WebFetch(domain:localhost)"),
	// compared in normHost form, on any port. An allow rule also lets
	// WebFetch reach that host at a loopback, private or other non-public
	// address.
	RuleKindDomain = "domain"
)

// RuleMaxBytes bounds the text of one rule.
const RuleMaxBytes = 1024

// Rule is a user permission rule, written in the syntax users of Claude
// Code know:
//
//	Read                   every call of the tool
//	category:file_write    every call of a permission category
//	Bash(go test ./...)    exactly this command
//	Bash(npm run test:*)   a single command starting with these words
//	Read(src/**)           Read, Glob and Grep of paths matching the glob
//	Edit(docs/*.md)        Edit and Write of matching paths
//	Write(out/**)          Write of matching paths
//	WebFetch(domain:h)     WebFetch of URLs whose host is h
//
// A path glob is relative to the session workspace unless it starts with
// "/"; "**" crosses directories. Deny rules are decided before allow rules.
type Rule struct {
	Effect string // RuleAllow or RuleDeny
	Kind   string // one of the RuleKind constants
	// Tool is the tool the rule names (RuleKindTool, RuleKindPath; "Bash"
	// for the Bash kinds).
	Tool string
	// Value is the category, the canonical command, the command prefix or
	// the path glob.
	Value string
}

// String renders the rule in ParseRule syntax.
func (r Rule) String() string {
	switch r.Kind {
	case RuleKindCategory:
		return "category:" + r.Value
	case RuleKindBashExact:
		return NameBash + "(" + r.Value + ")"
	case RuleKindBashPrefix:
		return NameBash + "(" + r.Value + ":*)"
	case RuleKindPath:
		return r.Tool + "(" + r.Value + ")"
	case RuleKindDomain:
		return NameWebFetch + "(domain:" + r.Value + ")"
	}
	return r.Tool
}

// toolNamePattern is what a rule accepts as a tool name.
var toolNamePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,127}$`) })

// pathRuleTools are the tools whose rules take a path glob, with the tools
// each one covers.
var pathRuleTools = map[string][]string{
	NameRead:  {NameRead, NameGlob, NameGrep},
	NameEdit:  {NameEdit, NameWrite},
	NameWrite: {NameWrite},
	NameGlob:  {NameGlob},
	NameGrep:  {NameGrep},
}

// ParseRule parses a rule in the syntax of Rule; effect is "allow" or
// "deny".
func ParseRule(effect, s string) (Rule, error) {
	effect = strings.ToLower(strings.TrimSpace(effect))
	if effect != RuleAllow && effect != RuleDeny {
		return Rule{}, fmt.Errorf("rule effect must be allow or deny, got %q", effect)
	}
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return Rule{}, fmt.Errorf("empty permission rule")
	case len(s) > RuleMaxBytes:
		return Rule{}, fmt.Errorf("permission rule longer than %d bytes", RuleMaxBytes)
	}
	if cat, ok := strings.CutPrefix(s, "category:"); ok {
		cat = strings.TrimSpace(cat)
		if _, known := permissionMatrix[cat]; !known {
			return Rule{}, fmt.Errorf("unknown tool category %q in rule %q", cat, s)
		}
		return Rule{Effect: effect, Kind: RuleKindCategory, Value: cat}, nil
	}
	open := strings.IndexByte(s, '(')
	if open < 0 {
		if !toolNamePattern().MatchString(s) {
			return Rule{}, fmt.Errorf("rule %q: a tool name is letters, digits, '_', '-' and '.' (examples: Read, 'Bash(git status)', category:file_write)", s)
		}
		return Rule{Effect: effect, Kind: RuleKindTool, Tool: canonicalToolName(s)}, nil
	}
	name := strings.TrimSpace(s[:open])
	if !strings.HasSuffix(s, ")") {
		return Rule{}, fmt.Errorf("rule %q: missing closing parenthesis", s)
	}
	inner := strings.TrimSpace(s[open+1 : len(s)-1])
	tool := canonicalToolName(name)
	if tool == NameBash {
		if inner == "*" {
			return Rule{Effect: effect, Kind: RuleKindTool, Tool: NameBash}, nil
		}
		if prefix, ok := strings.CutSuffix(inner, ":*"); ok {
			prefix = CanonicalCommand(prefix)
			if prefix == "" {
				return Rule{}, fmt.Errorf("rule %q: empty command prefix", s)
			}
			if !simpleCommand(prefix) {
				return Rule{}, fmt.Errorf("rule %q: a prefix rule names one simple command (no ; & | < > $ ` ( ) or newlines)", s)
			}
			return Rule{Effect: effect, Kind: RuleKindBashPrefix, Tool: NameBash, Value: prefix}, nil
		}
		cmd := CanonicalCommand(inner)
		if cmd == "" {
			return Rule{}, fmt.Errorf("rule %q: empty command", s)
		}
		return Rule{Effect: effect, Kind: RuleKindBashExact, Tool: NameBash, Value: cmd}, nil
	}
	if tool == NameWebFetch {
		host, ok := strings.CutPrefix(inner, "domain:")
		if !ok {
			return Rule{}, fmt.Errorf("rule %q: a WebFetch rule names a host as WebFetch(domain:example.com)", s)
		}
		host, err := normHost(strings.TrimSpace(host))
		if err != nil {
			return Rule{}, fmt.Errorf("rule %q: %v", s, err)
		}
		return Rule{Effect: effect, Kind: RuleKindDomain, Tool: NameWebFetch, Value: host}, nil
	}
	if _, ok := pathRuleTools[tool]; !ok {
		return Rule{}, fmt.Errorf("rule %q: only Bash, Read, Edit, Write, Glob, Grep and WebFetch rules take an argument", s)
	}
	glob := filepath.ToSlash(inner)
	if glob == "" {
		return Rule{}, fmt.Errorf("rule %q: empty path glob", s)
	}
	if strings.HasPrefix(glob, "./") || glob == "." {
		glob = strings.TrimPrefix(strings.TrimPrefix(glob, "."), "/")
		if glob == "" {
			glob = "**"
		}
	}
	if !doublestar.ValidatePattern(glob) {
		return Rule{}, fmt.Errorf("rule %q: invalid path glob", s)
	}
	return Rule{Effect: effect, Kind: RuleKindPath, Tool: tool, Value: glob}, nil
}

// canonicalToolName returns the built-in tool's own spelling of name, or
// name as given.
func canonicalToolName(name string) string {
	for _, n := range []string{NameRead, NameWrite, NameEdit, NameBash, NameGlob, NameGrep, NameWebFetch} {
		if strings.EqualFold(n, name) {
			return n
		}
	}
	return name
}

// CanonicalCommand is the form of a Bash command that rules and remembered
// approvals compare: surrounding whitespace trimmed and, in a command with
// no quote, backslash, "$" or backquote, runs of spaces and tabs folded to
// one space (there they only separate words). Anything else is kept as it
// is, so two commands with the same canonical form run the same words; a
// newline (a second command to the shell) is never folded.
func CanonicalCommand(s string) string {
	s = strings.TrimSpace(s)
	if strings.ContainsAny(s, "'\"\\$`") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == ' ' || c == '\t' {
			space = true
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteByte(c)
	}
	return b.String()
}

// simpleCommand reports whether a canonical command is one simple command:
// no operator, redirection, substitution, grouping or second line, even
// inside quotes (where a prompt costs less than a wrong guess).
func simpleCommand(cmd string) bool {
	return !strings.ContainsAny(cmd, ";&|<>$`()\n\r{}\\")
}

// containsWords reports whether words stand in cmd as whole words: at the
// start or after a character that is not part of a word (a blank, an
// operator, a quote, a "/" of a path), and followed by the end or such a
// character; a prefix may be followed by anything.
func containsWords(cmd, words string, prefix bool) bool {
	for i := 0; i < len(cmd); i++ {
		j := strings.Index(cmd[i:], words)
		if j < 0 {
			return false
		}
		at, end := i+j, i+j+len(words)
		before := at == 0 || cmd[at-1] == '/' || !isShellWordByte(cmd[at-1])
		after := prefix || end == len(cmd) || !isShellWordByte(cmd[end])
		if before && after {
			return true
		}
		i = at
	}
	return false
}

// isShellWordByte reports whether c continues a shell word.
func isShellWordByte(c byte) bool {
	return c == '_' || c == '-' || c == '.' || c == '/' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// matchContext is what rule matching knows of a call.
type matchContext struct {
	tool     string
	category string
	args     json.RawMessage
	// workspace and root are the workspace as given and its real path.
	workspace, root string
}

func (r Rule) matches(m matchContext) bool {
	switch r.Kind {
	case RuleKindTool:
		return strings.EqualFold(r.Tool, m.tool)
	case RuleKindCategory:
		return r.Value == m.category
	case RuleKindBashExact, RuleKindBashPrefix:
		if m.tool != NameBash {
			return false
		}
		cmd := CanonicalCommand(stringArg(m.args, "command"))
		if r.Effect == RuleDeny {
			// A deny refuses the words wherever they stand in the
			// command line: after ;, &&, |, inside $( ) or quotes.
			return containsWords(cmd, r.Value, r.Kind == RuleKindBashPrefix)
		}
		if r.Kind == RuleKindBashExact {
			return cmd == r.Value
		}
		return simpleCommand(cmd) && (cmd == r.Value || strings.HasPrefix(cmd, r.Value+" "))
	case RuleKindPath:
		covered := false
		for _, t := range pathRuleTools[r.Tool] {
			covered = covered || t == m.tool
		}
		if !covered {
			return false
		}
		forms := pathForms(m)
		if len(forms) == 0 {
			return false
		}
		// An allow covers the call only when every form of its path
		// matches; a deny refuses it when any form does (a symlink
		// cannot lead an allowed name to a denied file). A relative glob
		// sees workspace-relative forms, an absolute one absolute forms.
		all, any := true, false
		for _, f := range forms {
			p := f.rel
			if strings.HasPrefix(r.Value, "/") {
				p = f.abs
			}
			ok := p != "" && r.matchPath(p)
			all, any = all && ok, any || ok
		}
		if r.Effect == RuleDeny {
			return any
		}
		return all
	case RuleKindDomain:
		if m.tool != NameWebFetch {
			return false
		}
		u, err := parseWebURL(stringArg(m.args, "url"))
		return err == nil && u.Hostname() == r.Value
	}
	return false
}

// hiddenPath is the path a deny Read rule names outright ("secrets/**",
// "config/prod.env", "/etc/ssl/private/**"), absolute, for the sandbox to
// hide from commands too; ok is false for a rule that is not a deny Read
// rule or whose glob is a pattern rather than a path.
func (r Rule) hiddenPath(workspace string) (string, bool) {
	if r.Effect != RuleDeny || r.Kind != RuleKindPath || r.Tool != NameRead {
		return "", false
	}
	p := strings.TrimSuffix(strings.TrimSuffix(r.Value, "/**"), "/")
	if p == "" || p == "**" || strings.ContainsAny(p, "*?[{\\") {
		return "", false
	}
	if !filepath.IsAbs(p) {
		if workspace == "" {
			return "", false
		}
		p = filepath.Join(workspace, p)
	}
	return filepath.Clean(p), true
}

// matchPath matches one workspace-relative or absolute slash path.
func (r Rule) matchPath(p string) bool {
	ok, err := doublestar.Match(r.Value, p)
	return err == nil && ok
}

// pathForm is a call's path as rules see it: relative to the workspace
// ("" when outside it) and absolute, both slash-separated and clean.
type pathForm struct{ rel, abs string }

// pathForms returns the forms a rule's glob is matched against: the path
// as given and, where it resolves elsewhere through a symlink, the real
// path (of the file, or of its parent for a file yet to be written).
func pathForms(m matchContext) []pathForm {
	key := "path"
	if m.tool == NameGlob {
		key = "cwd"
	}
	arg := stringArg(m.args, key)
	if arg == "" {
		if m.tool != NameGlob && m.tool != NameGrep {
			return nil
		}
		arg = "."
	}
	if m.workspace == "" {
		return nil
	}
	abs := arg
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(m.workspace, arg)
	}
	abs = filepath.Clean(abs)
	forms := []pathForm{formOf(m, abs)}
	if real := realPath(abs); real != abs {
		forms = append(forms, formOf(m, real))
	}
	return forms
}

// realPath resolves the symlinks of abs: of the path itself when it exists,
// else of its deepest existing ancestor, with the rest appended (where a
// file yet to be written would land).
func realPath(abs string) string {
	rest := ""
	for dir := abs; ; dir = filepath.Dir(dir) {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(real, rest)
		}
		if filepath.Dir(dir) == dir {
			return abs
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

// formOf is an absolute path as a rule sees it.
func formOf(m matchContext, abs string) pathForm {
	f := pathForm{abs: filepath.ToSlash(abs)}
	for _, base := range []string{m.workspace, m.root} {
		if base != "" && within(base, abs) {
			if rel, err := filepath.Rel(base, abs); err == nil {
				f.rel = path.Clean(filepath.ToSlash(rel))
				break
			}
		}
	}
	return f
}
