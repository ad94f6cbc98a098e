package tools

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/maka-agent/maka/protocol"
)

// This file is the redactor of tool text: what the model reads and what
// the record keeps of a call. It matches secrets, not words: a provider
// key must start a token, a credential keyword must be a whole key (not a
// path component), and git object ids are kept.
//
// It is not a superset of protocol.RedactSecrets, whose rules are the
// original host's wire rules (it also masks "sk-" inside a word and every
// run of 40 hex digits). Text that becomes a canonical protocol string (a
// permission review, a task subject) must still pass protocol.RedactSecrets.

// MinKnownSecretLen is the length, in bytes, below which a known secret
// value is not masked (too short to be told apart from ordinary text).
const MinKnownSecretLen = 8

// redactRounds bounds how often Redact reapplies its rules to reach a
// text they leave unchanged.
const redactRounds = 4

var (
	privateKeyBlock = regexp.MustCompile(`(?s)-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\z)`)
	// tokenPatterns are credentials recognised by their form; each starts
	// at a word boundary.
	tokenPatterns = []*regexp.Regexp{
		regexp.MustCompile(`\bsk-[A-Za-z0-9_-]{16,}`),
		regexp.MustCompile(`\bAIza[0-9A-Za-z_-]{35}`),
		regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{20,}`),
		regexp.MustCompile(`\bgithub_pat_[A-Za-z0-9_]{22,}`),
		regexp.MustCompile(`\bxox[abprs]-[A-Za-z0-9-]{10,}`),
		regexp.MustCompile(`\bAKIA[0-9A-Z]{16}`),
		regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9._~+/-]{20,}=*`),
	}
	// tokenPrefixes are the literals one of tokenPatterns needs, in lower
	// case: a text holding none of them skips the patterns.
	tokenPrefixes = []string{"sk-", "aiza", "gh", "github_pat_", "xox", "akia", "bearer"}
	hexRun        = regexp.MustCompile(`[0-9a-fA-F]{40,}`)
	// credentialValue is a credential assignment: the key (group 1), an
	// optional closing quote of the key (2), ':' or '=' (3), an optional
	// opening quote of the value (4) and the value (5). It never crosses a
	// line, so it only runs on lines that mention one of credentialWords.
	credentialValue = regexp.MustCompile(`(?i)((?:api|secret|access|private)[_-]?key|(?:access|auth|refresh|session)[_-]?token|client[_-]?secret|password|passwd)(["']?)[ \t]*([:=])[ \t]*(["']?)([^\s"'&,;]{4,})`)
	credentialWords = []string{"key", "token", "secret", "passw"}
)

// knownSecrets is the source installed by SetKnownSecrets.
var knownSecrets atomic.Pointer[func() []string]

// SetKnownSecrets installs the source of exact secret values (the keys of
// the credential vault) that Redact masks wherever they occur, besides
// what it recognises by form. Values shorter than MinKnownSecretLen bytes
// are ignored. secrets is called on every Redact, concurrently: it must be
// cheap and safe for concurrent use. nil removes the source.
func SetKnownSecrets(secrets func() []string) {
	if secrets == nil {
		knownSecrets.Store(nil)
		return
	}
	knownSecrets.Store(&secrets)
}

// Redact masks secrets in s with "[REDACTED]": the known secret values
// (SetKnownSecrets), provider API keys (sk-…), bearer tokens, AWS access
// key ids (AKIA…), GitHub and Slack tokens, Google API keys, private key
// blocks, runs of hex digits that are not git object ids (40 or 64 lower
// case digits) and the values of credential assignments such as
// api_key=…, "password": "…" or password: <secret-looking value>. It is
// idempotent: Redact(Redact(s)) == Redact(s).
func Redact(s string) string {
	for range redactRounds {
		next := redactOnce(s)
		if next == s {
			return s
		}
		s = next
	}
	return s
}

func redactOnce(s string) string {
	s = redactKnown(s)
	if strings.Contains(s, "PRIVATE KEY-----") {
		s = privateKeyBlock.ReplaceAllString(s, protocol.RedactedMarker)
	}
	lower := asciiLower(s)
	s = redactCredentialValues(s, lower)
	for _, p := range tokenPrefixes {
		if strings.Contains(lower, p) {
			for _, re := range tokenPatterns {
				s = re.ReplaceAllString(s, protocol.RedactedMarker)
			}
			break
		}
	}
	return redactHexRuns(s)
}

// redactKnown masks the known secret values that occur in s, longest
// first, so that a secret holding another is masked whole.
func redactKnown(s string) string {
	src := knownSecrets.Load()
	if src == nil {
		return s
	}
	var found []string
	for _, v := range (*src)() {
		if len(v) >= MinKnownSecretLen && !strings.Contains(v, protocol.RedactedMarker) && strings.Contains(s, v) {
			found = append(found, v)
		}
	}
	if len(found) > 1 {
		slices.SortFunc(found, func(a, b string) int { return len(b) - len(a) })
	}
	for _, v := range found {
		s = strings.ReplaceAll(s, v, protocol.RedactedMarker)
	}
	return s
}

// redactHexRuns masks runs of 40 or more hex digits, except git object
// ids: runs of exactly 40 or 64 lower-case hex digits.
func redactHexRuns(s string) string {
	locs := hexRun.FindAllStringIndex(s, -1)
	if locs == nil {
		return s
	}
	var b strings.Builder
	last := 0
	for _, l := range locs {
		if isObjectID(s[l[0]:l[1]]) {
			continue
		}
		b.WriteString(s[last:l[0]])
		b.WriteString(protocol.RedactedMarker)
		last = l[1]
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// isObjectID reports whether h, a run of hex digits, is a git object id
// (SHA-1 or SHA-256, lower case).
func isObjectID(h string) bool {
	if len(h) != 40 && len(h) != 64 {
		return false
	}
	return strings.IndexFunc(h, func(r rune) bool { return r >= 'A' && r <= 'F' }) < 0
}

// redactCredentialValues masks the values of credential assignments,
// running the pattern only on the lines that can hold one. lower is s in
// ASCII lower case.
func redactCredentialValues(s, lower string) string {
	var b strings.Builder
	copied := 0 // s[:copied] is already in b
	for pos := 0; pos < len(s); {
		next := -1
		for _, w := range credentialWords {
			if i := strings.Index(lower[pos:], w); i >= 0 && (next < 0 || pos+i < next) {
				next = pos + i
			}
		}
		if next < 0 {
			break
		}
		start := max(strings.LastIndexByte(s[:next], '\n')+1, pos)
		end := len(s)
		if nl := strings.IndexByte(s[next:], '\n'); nl >= 0 {
			end = next + nl
		}
		line := s[start:end]
		if masked := redactCredentialLine(line); masked != line {
			b.WriteString(s[copied:start])
			b.WriteString(masked)
			copied = end
		}
		pos = end
	}
	if copied == 0 {
		return s
	}
	b.WriteString(s[copied:])
	return b.String()
}

// redactCredentialLine masks the credential values of one line. A match
// counts when its key is a whole key (see isCredentialKey) and its value
// is a secret: any value of '=' or of a quoted ':' form, else a value that
// looks like one (see looksSecret).
func redactCredentialLine(line string) string {
	var b strings.Builder
	copied := 0
	for pos := 0; pos < len(line); {
		m := credentialValue.FindStringSubmatchIndex(line[pos:])
		if m == nil {
			break
		}
		for i := range m {
			m[i] += pos
		}
		keyStart, keyEnd := m[2], m[3]
		sep, quoted := line[m[6]:m[7]], m[9] > m[8]
		valStart, valEnd := m[10], m[11]
		val := line[valStart:valEnd]
		if !isCredentialKey(line, keyStart) || val == protocol.RedactedMarker ||
			(sep == ":" && !quoted && !looksSecret(val)) {
			// The value may hold an assignment of its own.
			pos = keyEnd
			continue
		}
		b.WriteString(line[copied:valStart])
		b.WriteString(protocol.RedactedMarker)
		copied, pos = valEnd, valEnd
	}
	if copied == 0 {
		return line
	}
	b.WriteString(line[copied:])
	return b.String()
}

// isCredentialKey reports whether the credential keyword at line[i:] ends
// a whole key: the identifier it ends is not a path component (it does
// not follow '/' or '\'), and the keyword is the identifier or its last
// part (after '_', '-', '.' or a camelCase boundary).
func isCredentialKey(line string, i int) bool {
	start := i
	for start > 0 && isKeyByte(line[start-1]) {
		start--
	}
	if start > 0 && (line[start-1] == '/' || line[start-1] == '\\') {
		return false
	}
	if start == i {
		return true
	}
	switch c := line[i-1]; {
	case c == '_' || c == '-' || c == '.':
		return true
	case (c >= 'a' && c <= 'z' || c >= '0' && c <= '9') && line[i] >= 'A' && line[i] <= 'Z':
		return true
	}
	return false
}

func isKeyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
}

// looksSecret reports whether an unquoted value looks like a secret: at
// least 8 bytes mixing at least two of lower case letters, upper case
// letters, digits and other characters.
func looksSecret(v string) bool {
	if len(v) < 8 {
		return false
	}
	var lower, upper, digit, other int
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c >= 'a' && c <= 'z':
			lower = 1
		case c >= 'A' && c <= 'Z':
			upper = 1
		case c >= '0' && c <= '9':
			digit = 1
		default:
			other = 1
		}
	}
	return lower+upper+digit+other >= 2
}

// asciiLower lower-cases A-Z only, keeping byte offsets.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// RedactResult returns res with its model text and every string of its
// content redacted; the content stays valid JSON and keeps its layout
// (numbers, literals and unchanged strings are kept byte for byte).
// Object keys are redacted too: a tool may build them from what it read.
// Content that is not JSON is redacted as text.
func RedactResult(res Result) Result {
	res.ModelText = Redact(res.ModelText)
	if len(res.Content) == 0 {
		return res
	}
	if !json.Valid(res.Content) {
		res.Content = json.RawMessage(Redact(string(res.Content)))
		return res
	}
	res.Content = redactJSONStrings(res.Content)
	return res
}

// redactJSONStrings redacts the strings of data, which is valid JSON.
func redactJSONStrings(data []byte) []byte {
	var out []byte // nil until a string changes
	copied := 0
	for i := 0; i < len(data); i++ {
		if data[i] != '"' {
			continue
		}
		end := i + 1
		for ; end < len(data) && data[end] != '"'; end++ {
			if data[end] == '\\' {
				end++
			}
		}
		end++ // past the closing quote
		if repl, ok := redactJSONString(data[i:end]); ok {
			out = append(out, data[copied:i]...)
			out = append(out, repl...)
			copied = end
		}
		i = end - 1
	}
	if out == nil {
		return data
	}
	return append(out, data[copied:]...)
}

// redactJSONString redacts one JSON string literal; ok is false when it
// is unchanged.
func redactJSONString(lit []byte) ([]byte, bool) {
	var s string
	if err := json.Unmarshal(lit, &s); err != nil {
		return nil, false
	}
	r := Redact(s)
	if r == s {
		return nil, false
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, false
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), true
}
