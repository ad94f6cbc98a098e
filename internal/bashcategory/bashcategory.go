// Package bashcategory classifies a shell command into the category, and so
// the prompt reason, of its Bash permission prompt. The protocol's
// interaction decoders use it to check that a prompt's category matches its
// command review, so its result must be reproducible bit for bit: the
// patterns below keep the JavaScript regular-expression semantics of the
// original classifier (JavaScript whitespace for \s and trim, '.' stopping at
// line terminators, ASCII-only case folding for case-insensitive patterns).
package bashcategory

import (
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"
)

// The categories Categorize returns, spelled as the protocol's ToolCategory
// values of the same names.
const (
	Privileged     = "privileged"
	FSDestructive  = "fs_destructive"
	GitDestructive = "git_destructive"
	ShellUnsafe    = "shell_unsafe"
)

// bashSpaceClass is the body of JavaScript's \s class (WhiteSpace plus
// LineTerminator), which is also the set String.prototype.trim removes.
const bashSpaceClass = `\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff}`

// bashIsSpace reports whether r belongs to JavaScript's \s class.
func bashIsSpace(r rune) bool {
	switch {
	case r == '\t' || r == '\n' || r == '\v' || r == '\f' || r == '\r' || r == ' ':
		return true
	case r < 0x80:
		return false
	case r == 0xa0 || r == 0x1680 || (r >= 0x2000 && r <= 0x200a) || r == 0x2028 || r == 0x2029 ||
		r == 0x202f || r == 0x205f || r == 0x3000 || r == 0xfeff:
		return true
	}
	return false
}

// bashIsLineTerminator reports whether r ends a line for JavaScript's '.'.
func bashIsLineTerminator(r rune) bool {
	return r == '\n' || r == '\r' || r == 0x2028 || r == 0x2029
}

// bashTrim is String.prototype.trim.
func bashTrim(s string) string {
	return strings.TrimFunc(s, bashIsSpace)
}

// bashSpacePrefix returns the length in bytes of the run of JavaScript
// whitespace at the start of s.
func bashSpacePrefix(s string) int {
	for i, r := range s {
		if !bashIsSpace(r) {
			return i
		}
	}
	return len(s)
}

// bashNonSpacePrefix returns the length in bytes of the run of non-whitespace
// at the start of s.
func bashNonSpacePrefix(s string) int {
	for i, r := range s {
		if bashIsSpace(r) {
			return i
		}
	}
	return len(s)
}

// bashToLower is String.prototype.toLowerCase as far as it matters for ASCII
// prefix tests: Unicode lower-casing, where U+0130 becomes "i\u0307" rather
// than a plain "i".
func bashToLower(s string) string {
	if !strings.ContainsRune(s, 0x130) {
		return strings.ToLower(s)
	}
	return strings.ToLower(strings.ReplaceAll(s, "\u0130", "i\u0307"))
}

// bashASCIILower lower-cases A-Z only. Matching an all-lowercase ASCII pattern
// against bashASCIILower(s) is exactly a case-insensitive, non-Unicode
// JavaScript match: no non-ASCII character folds to an ASCII one there.
func bashASCIILower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// bashRegexp compiles a pattern written with JavaScript meanings: outside
// bracket expressions, \s and \S use JavaScript whitespace and '.' excludes
// the JavaScript line terminators; bracket expressions (which must not
// start with "]") are copied as is. \d, \w and \b are ASCII in both
// dialects.
func bashRegexp(pattern string) *regexp.Regexp {
	var b strings.Builder
	inClass := false
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		switch {
		case c == '\\' && i+1 < len(pattern):
			n := pattern[i+1]
			i++
			switch {
			case !inClass && n == 's':
				b.WriteString("[" + bashSpaceClass + "]")
			case !inClass && n == 'S':
				b.WriteString("[^" + bashSpaceClass + "]")
			default:
				b.WriteByte('\\')
				b.WriteByte(n)
			}
		case inClass:
			if c == ']' {
				inClass = false
			}
			b.WriteByte(c)
		case c == '[':
			inClass = true
			b.WriteByte(c)
		case c == '.':
			b.WriteString(`[^\n\r\x{2028}\x{2029}]`)
		default:
			b.WriteByte(c)
		}
	}
	return regexp.MustCompile(b.String())
}

// bashPrivilegedPrefixes are matched against the lower-cased segment.
var bashPrivilegedPrefixes = []string{
	"sudo ", "su ", "doas ", "chmod ", "chown ", "chgrp ", "mount ", "umount ", "kill ", "pkill ",
	"killall ", "systemctl ", "service ", "launchctl ", "shutdown", "reboot",
}

// bashPrivilegedPatternsCI are PowerShell / cmd.exe equivalents of the
// privileged prefixes, matched case-insensitively (against bashASCIILower).
var bashPrivilegedPatternsCI = sync.OnceValue(func() []*regexp.Regexp {
	return []*regexp.Regexp{
		bashRegexp(`^(kill|stop-process|spps|taskkill)\b`),
		bashRegexp(`(^|\s)-verb\s+runas\b`),
		bashRegexp(`^((start|stop|restart|set|new|remove|suspend|resume)-service|sasv|spsv)\b`),
		bashRegexp(`^sc\s+(stop|start|pause|continue|delete|config|create|failure|sdset)\b`),
		bashRegexp(`^net\s+(stop|start|pause|continue)\b`),
		bashRegexp(`^(stop-computer|restart-computer)\b`),
		bashRegexp(`^(icacls|takeown|set-acl|runas)\b`),
	}
})

// bashFSPatterns are irreversible filesystem operations, anchored at the
// start of a statement segment.
var bashFSPatterns = sync.OnceValue(func() []*regexp.Regexp {
	return []*regexp.Regexp{
		bashRegexp(`^dd\s+`),
		bashRegexp(`^truncate\b`),
		bashRegexp(`^shred\b`),
		bashRegexp(`^mkfs\b`),
		bashRegexp(`^git\s+restore\s+(\.\s*$|--\s+\S+)`),
		bashRegexp(`^git\s+checkout\s+--\s+\S+`),
		bashRegexp(`^find\s+.*\s-delete\b`),
		bashRegexp(`^find\s+.*\s-exec\s+.*\b(rm|shred|truncate|dd)\b`),
		bashRegexp(`^xargs\s+.*\b(rm|shred|truncate|dd)\b`),
	}
})

// bashFSPatternsCI are the case-insensitive deletes (POSIX rm family and the
// PowerShell / cmd.exe equivalents), matched against bashASCIILower.
var bashFSPatternsCI = sync.OnceValue(func() []*regexp.Regexp {
	return []*regexp.Regexp{
		bashRegexp(`^remove-item\b`),
		bashRegexp(`^(rm|rmdir|ri|del|erase|rd)\b`),
		bashRegexp(`^(clear-content|clc)\b`),
	}
})

// bashPipePatterns run against the whole trimmed command.
var bashPipePatterns = sync.OnceValue(func() []*regexp.Regexp {
	return []*regexp.Regexp{
		bashRegexp(`\|\s*xargs\b[^\n;&|]*\b(rm|shred|truncate|dd)\b`),
		bashRegexp(`\|\s*(sh|bash|zsh)\b`),
	}
})

var bashGitPatterns = sync.OnceValue(func() []*regexp.Regexp {
	return []*regexp.Regexp{
		bashRegexp(`^git\s+reset\s+--hard\b`),
		bashRegexp(`^git\s+push\s+(--force|-f)\b`),
		bashRegexp(`^git\s+branch\s+-D\b`),
		bashRegexp(`^git\s+clean\s+-fd?\b`),
		bashRegexp(`^git\s+checkout\s+\.\s*$`),
		bashRegexp(`^git\s+rebase\s+-i\b`),
	}
})

// bashWrappers defer to the real command later in the segment.
var bashWrappers = map[string]bool{
	"nohup": true, "nice": true, "time": true, "timeout": true, "env": true,
	"command": true, "exec": true, "stdbuf": true, "xargs": true,
}

// Nested shell flags; the payload is the first capture group. The POSIX
// shells are matched on the segment as is, PowerShell and cmd.exe
// case-insensitively.
var (
	bashPosixShellFlag = sync.OnceValue(func() *regexp.Regexp { return bashRegexp(`(?:^|\s)-\w*c\s+([\x00-\x{10FFFF}]+)$`) })
	bashPwshFlag       = sync.OnceValue(func() *regexp.Regexp { return bashRegexp(`\s-c(?:ommand)?\s+([\x00-\x{10FFFF}]+)$`) })
	bashCmdFlag        = sync.OnceValue(func() *regexp.Regexp { return bashRegexp(`\s/[ck]\s+([\x00-\x{10FFFF}]+)$`) })
)

// bashMaxNesting bounds how deep shell-in-shell payloads are followed.
const bashMaxNesting = 2

// bashMaxWrapperHops bounds how many wrapper commands are unwrapped.
const bashMaxWrapperHops = 5

// Categorize classifies a shell command into the tool category used for
// its permission prompt. It never returns shell_safe: no command is provably
// safe from its text. It scans every statement segment (split on ; | & ( ) { }
// newlines and backticks), canonicalizes each segment's command name
// (quotes, a leading backslash, a path prefix and .exe dropped; wrappers such
// as nohup, env, timeout, nice, time, command, exec, stdbuf and xargs
// skipped with their options), follows literal sh/bash/zsh -c, pwsh -c and
// cmd /c payloads, and picks, in order of precedence, privileged,
// fs_destructive, git_destructive, else shell_unsafe.
func Categorize(command string) string {
	trimmed := bashTrim(command)
	segments := bashScanSegments(command, bashMaxNesting)
	if strings.Contains(command, "`") {
		segments = append(segments, bashScanSegments(strings.ReplaceAll(command, "`", ""), bashMaxNesting)...)
	}
	for _, s := range segments {
		if bashPrivileged(s) {
			return Privileged
		}
	}
	for _, s := range segments {
		if bashAnyMatch(bashFSPatterns(), s) || bashAnyMatch(bashFSPatternsCI(), bashASCIILower(s)) {
			return FSDestructive
		}
	}
	if bashAnyMatch(bashPipePatterns(), trimmed) {
		return FSDestructive
	}
	for _, s := range segments {
		if bashAnyMatch(bashGitPatterns(), s) {
			return GitDestructive
		}
	}
	return ShellUnsafe
}

func bashAnyMatch(patterns []*regexp.Regexp, s string) bool {
	for _, re := range patterns {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}

func bashPrivileged(segment string) bool {
	lower := bashToLower(segment)
	for _, p := range bashPrivilegedPrefixes {
		if strings.HasPrefix(lower, p) {
			return true
		}
	}
	return bashAnyMatch(bashPrivilegedPatternsCI(), bashASCIILower(segment))
}

// bashSegments splits a command on runs of statement, pipeline, grouping and
// substitution boundaries. The split is deliberately quote-naive: $( ) and
// backticks expand inside double quotes, so every boundary is a candidate.
func bashSegments(command string) []string {
	parts := strings.FieldsFunc(command, func(r rune) bool {
		switch r {
		case '|', ';', '&', '\n', '(', ')', '{', '}', '`':
			return true
		}
		return false
	})
	out := parts[:0]
	for _, p := range parts {
		if p = bashTrim(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// bashScanSegments returns the head-normalized segments of command plus,
// recursively, those of any literal nested shell payload.
func bashScanSegments(command string, depth int) []string {
	var out []string
	for _, raw := range bashSegments(command) {
		segment := bashNormalizeHead(raw)
		out = append(out, segment)
		if depth == 0 {
			continue
		}
		if payload := bashNestedPayload(segment); payload != "" {
			out = append(out, bashScanSegments(payload, depth-1)...)
		}
	}
	return out
}

// bashNormalizeHead rewrites the segment's first word to the command name it
// resolves to, skipping wrapper commands and their option-like arguments.
func bashNormalizeHead(segment string) string {
	rest := segment
	for hop := 0; hop < bashMaxWrapperHops; hop++ {
		head, tail, ok := bashQuotedHead(rest)
		if !ok {
			n := bashNonSpacePrefix(rest)
			if n == 0 {
				return rest
			}
			head = rest[:n]
			tail = rest[n:]
			tail = tail[bashSpacePrefix(tail):]
		}
		head = strings.Map(func(r rune) rune {
			if r == '\'' || r == '"' || r == '^' {
				return -1
			}
			return r
		}, head)
		head = strings.TrimPrefix(head, `\`)
		if i := strings.LastIndexAny(head, `\/`); i >= 0 {
			head = head[i+1:]
		}
		if n := len(head); n >= 4 && bashASCIILower(head[n-4:]) == ".exe" {
			head = head[:n-4]
		}
		if bashWrappers[bashToLower(head)] {
			rest = bashSkipWrapperArgs(tail)
			continue
		}
		if tail == "" {
			return head
		}
		return head + " " + tail
	}
	return rest
}

// bashQuotedHead matches /^(['"])(.+?)\1(\s+|$)/: a quoted first word
// followed by whitespace or the end of the segment.
func bashQuotedHead(s string) (head, tail string, ok bool) {
	if s == "" || (s[0] != '\'' && s[0] != '"') {
		return "", "", false
	}
	q := s[0]
	for i := 1; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if bashIsLineTerminator(r) {
			return "", "", false
		}
		i += size
		if i < len(s) && s[i] == q {
			after := s[i+1:]
			if after == "" {
				return s[1:i], "", true
			}
			if n := bashSpacePrefix(after); n > 0 {
				return s[1:i], after[n:], true
			}
		}
	}
	return "", "", false
}

// bashSkipWrapperArgs drops leading wrapper arguments, each followed by
// whitespace: options (-x...), assignments (A=b) and durations (30, 5s).
func bashSkipWrapperArgs(s string) string {
	for {
		n := bashNonSpacePrefix(s)
		if n == 0 {
			return s
		}
		ws := bashSpacePrefix(s[n:])
		if ws == 0 || !bashWrapperArg(s[:n]) {
			return s
		}
		s = s[n+ws:]
	}
}

func bashWrapperArg(tok string) bool {
	if len(tok) >= 2 && tok[0] == '-' {
		return true
	}
	if len(tok) >= 2 && strings.IndexByte(tok[1:], '=') >= 0 {
		return true
	}
	i := 0
	for i < len(tok) && tok[i] >= '0' && tok[i] <= '9' {
		i++
	}
	if i == 0 {
		return false
	}
	return i == len(tok) || (i == len(tok)-1 && strings.IndexByte("smhd", tok[i]) >= 0)
}

// bashNestedPayload returns the literal script of sh/bash/zsh -c, pwsh -c or
// cmd /c, without one pair of enclosing quotes, or "".
func bashNestedPayload(segment string) string {
	head := segment[:bashNonSpacePrefix(segment)]
	var m []int
	switch lower := bashASCIILower(head); {
	case head == "sh" || head == "bash" || head == "zsh":
		m = bashPosixShellFlag().FindStringSubmatchIndex(segment)
	case lower == "pwsh" || lower == "powershell":
		m = bashPwshFlag().FindStringSubmatchIndex(bashASCIILower(segment))
	case lower == "cmd":
		m = bashCmdFlag().FindStringSubmatchIndex(bashASCIILower(segment))
	default:
		return ""
	}
	if m == nil {
		return ""
	}
	payload := bashTrim(segment[m[2]:m[3]])
	if n := len(payload); n >= 2 && (payload[0] == '\'' || payload[0] == '"') && payload[n-1] == payload[0] {
		payload = payload[1 : n-1]
	}
	return payload
}
