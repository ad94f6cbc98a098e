// Package permsyntax is the syntax of the permission settings a client
// sends with a turn and the host enforces: the permission modes, the
// sandbox modes, and the permission rules (parsing, canonical form). It
// is shared by the host's permission engine (internal/tools) and the
// command line, which checks flags before it sends them, so that the
// command line does not link the tools.
package permsyntax

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/bmatcuk/doublestar/v4"
	"golang.org/x/net/idna"

	"github.com/maka-agent/maka/protocol"
)

// The built-in tools' names.
const (
	NameRead     = "Read"
	NameWrite    = "Write"
	NameEdit     = "Edit"
	NameBash     = "Bash"
	NameGlob     = "Glob"
	NameGrep     = "Grep"
	NameWebFetch = "WebFetch"
)

// KnownCategory reports whether a rule may name category.
// (every protocol.ToolCategories, the rows of the host's permission
// matrix).
func KnownCategory(category string) bool { return slices.Contains(protocol.ToolCategories, category) }

// Modes are the session permission modes, from least to most permissive.
var Modes = []string{"explore", "ask", "execute", "bypass"}

// ParseMode parses a permission mode name (case-insensitive, surrounding
// whitespace ignored).
func ParseMode(s string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if slices.Contains(Modes, s) {
		return s, nil
	}
	return "", fmt.Errorf("unknown permission mode %q (want explore, ask, execute or bypass)", s)
}

// SandboxModes are the sandbox modes (maka run --sandbox).
var SandboxModes = []string{"off", "workspace-write", "read-only"}

// ValidSandboxMode reports whether s names a sandbox mode.
func ValidSandboxMode(s string) bool { return slices.Contains(SandboxModes, s) }

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

// PathRuleTools are the tools whose rules take a path glob, with the tools
// each one covers.
var PathRuleTools = map[string][]string{
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
		if !KnownCategory(cat) {
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
			if !SimpleCommand(prefix) {
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
		host, err := NormHost(strings.TrimSpace(host))
		if err != nil {
			return Rule{}, fmt.Errorf("rule %q: %v", s, err)
		}
		return Rule{Effect: effect, Kind: RuleKindDomain, Tool: NameWebFetch, Value: host}, nil
	}
	if _, ok := PathRuleTools[tool]; !ok {
		return Rule{}, fmt.Errorf("rule %q: only Bash, Read, Edit, Write, Glob, Grep and WebFetch rules take an argument", s)
	}
	glob := filepath.ToSlash(inner)
	if glob == "" {
		return Rule{}, fmt.Errorf("rule %q: empty path glob", s)
	}
	if strings.HasPrefix(glob, "./") || glob == "." {
		// "./x", ".//x": workspace-relative, never the absolute "/x"
		glob = strings.TrimLeft(strings.TrimPrefix(glob, "."), "/")
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

// SimpleCommand reports whether a canonical command is one simple command:
// no operator, redirection, substitution, grouping or second line, even
// inside quotes (where a prompt costs less than a wrong guess).
func SimpleCommand(cmd string) bool {
	return !strings.ContainsAny(cmd, ";&|<>$`()\n\r{}\\")
}

// NormHost is the form of a URL host that WebFetch requests and its
// permission rules compare: an IP address in its canonical text (IPv6
// without brackets), or a DNS name converted by IDNA's lookup profile
// (UTS #46: case folded, Unicode to punycode, STD3 rules), without a
// trailing dot. A host that could be read as an IPv4 address in another
// form (2130706433, 0x7f.1, 127.1, 010.0.0.1: a last label that is a
// number) is refused, as is an IPv6 zone, so that no spelling of an
// address escapes the rules.
func NormHost(h string) (string, error) {
	h = strings.TrimPrefix(strings.TrimSuffix(h, "]"), "[")
	if h == "" {
		return "", errors.New("the URL has no host")
	}
	if strings.Contains(h, ":") {
		a, err := netip.ParseAddr(h)
		if err != nil || !a.Is6() {
			return "", fmt.Errorf("the host %q is not a valid IPv6 address", h)
		}
		if a.Zone() != "" {
			return "", fmt.Errorf("the host %q names an IPv6 zone, which is refused", h)
		}
		return a.String(), nil
	}
	ascii, err := idna.Lookup.ToASCII(h)
	if err != nil {
		return "", fmt.Errorf("the host %q is not a valid host name: %v", h, err)
	}
	ascii = strings.TrimSuffix(ascii, ".")
	labels := strings.Split(ascii, ".")
	if len(ascii) > 253 || slices.Contains(labels, "") {
		return "", fmt.Errorf("the host %q is not a valid host name", h)
	}
	if a, err := netip.ParseAddr(ascii); err == nil {
		if !a.Is4() {
			return "", fmt.Errorf("the host %q is not a valid host name", h)
		}
		return a.String(), nil
	}
	if NumericLabel(labels[len(labels)-1]) {
		return "", fmt.Errorf("the host %q reads as a number; write an IPv4 address as four decimal parts (127.0.0.1)", h)
	}
	return ascii, nil
}

// NumericLabel reports whether a label is a number to the WHATWG host
// parser (decimal, 0x hex or 0 octal), which makes the host an IPv4 address
// in some form.
func NumericLabel(l string) bool {
	if l == "" {
		return false
	}
	if rest, ok := strings.CutPrefix(l, "0x"); ok {
		for _, c := range rest {
			if !strings.ContainsRune("0123456789abcdef", c) {
				return false
			}
		}
		return true
	}
	for _, c := range l {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
