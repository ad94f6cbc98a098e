package tools

import (
	"encoding/json"
	"path"
	"path/filepath"
	"strings"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/maka-agent/maka/internal/permsyntax"
)

// Rule effects and kinds: the rule syntax is permsyntax's, which the
// command line shares.
const (
	RuleAllow = permsyntax.RuleAllow
	RuleDeny  = permsyntax.RuleDeny

	RuleKindTool       = permsyntax.RuleKindTool
	RuleKindCategory   = permsyntax.RuleKindCategory
	RuleKindBashExact  = permsyntax.RuleKindBashExact
	RuleKindBashPrefix = permsyntax.RuleKindBashPrefix
	RuleKindPath       = permsyntax.RuleKindPath
	RuleKindDomain     = permsyntax.RuleKindDomain
)

// RuleMaxBytes bounds the text of one rule.
const RuleMaxBytes = permsyntax.RuleMaxBytes

// Rule is a user permission rule (permsyntax.Rule).
type Rule = permsyntax.Rule

// ParseRule parses a rule in the syntax of Rule; effect is "allow" or
// "deny".
func ParseRule(effect, s string) (Rule, error) { return permsyntax.ParseRule(effect, s) }

// CanonicalCommand is the form of a Bash command that rules and remembered
// approvals compare (permsyntax.CanonicalCommand).
func CanonicalCommand(s string) string { return permsyntax.CanonicalCommand(s) }

// pathRuleTools are the tools whose rules take a path glob, with the tools
// each one covers.
var pathRuleTools = permsyntax.PathRuleTools

// simpleCommand reports whether a canonical command is one simple command.
func simpleCommand(cmd string) bool { return permsyntax.SimpleCommand(cmd) }

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

func ruleMatches(r Rule, m matchContext) bool {
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
			ok := p != "" && ruleMatchPath(r, p)
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
func ruleHiddenPath(r Rule, workspace string) (string, bool) {
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
func ruleMatchPath(r Rule, p string) bool {
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
