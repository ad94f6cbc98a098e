package tools

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/maka-agent/maka/internal/wireredact"
)

// This file is the redactor of tool text: what the model reads and what
// the record keeps of a call. It matches secrets, not words: a provider
// key must start a token, a credential keyword must be a whole key (not a
// path component), and git object ids are kept.
//
// It is not a superset of wireredact.Redact, whose rules are the
// original host's wire rules (it also masks "sk-" inside a word and every
// run of 40 hex digits). Text that becomes a canonical protocol string (a
// permission review, a task subject) must still pass wireredact.Redact.

// MinKnownSecretLen is the length, in bytes, below which a known secret
// value is not masked (too short to be told apart from ordinary text).
const MinKnownSecretLen = 8

// redactRounds bounds how often Redact reapplies its rules to reach a
// text they leave unchanged.
const redactRounds = 4

var (
	privateKeyBlock = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?s)-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\z)`)
	})
	// tokenRules are credentials recognised by their form. "sk-" and
	// "bearer" start at a word boundary (they occur inside ordinary words);
	// the others are distinctive enough to be masked inside a word too
	// ("xghp_…" is still a token).
	tokenRules = sync.OnceValue(func() []tokenRule {
		return []tokenRule{
			{prefix: "sk-", re: regexp.MustCompile(`^sk-[A-Za-z0-9_-]{16,}`)},
			{prefix: "AIza", inWord: true, re: regexp.MustCompile(`^AIza[0-9A-Za-z_-]{35}`)},
			{prefix: "gh", inWord: true, re: regexp.MustCompile(`^gh[pousr]_[A-Za-z0-9]{20,}`)},
			{prefix: "github_pat_", inWord: true, re: regexp.MustCompile(`^github_pat_[A-Za-z0-9_]{22,}`)},
			{prefix: "xox", inWord: true, re: regexp.MustCompile(`^xox[abprs]-[A-Za-z0-9-]{10,}`)},
			{prefix: "AKIA", inWord: true, re: regexp.MustCompile(`^AKIA[0-9A-Z]{16}`)},
			{prefix: "bearer", fold: true, re: regexp.MustCompile(`^(?i)bearer\s+[A-Za-z0-9._~+/-]{20,}=*`)},
		}
	})
	// credentialValue is a credential assignment in lower case, anchored:
	// the key (group 1), an optional closing quote of the key (2), ':' or
	// '=' (3), an optional opening quote of the value (4) and the value
	// (5). It never crosses a line.
	credentialValue = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^((?:api|secret|access|private)[_-]?key|(?:access|auth|refresh|session)[_-]?token|client[_-]?secret|password|passwd)(["']?)[ \t]*([:=])[ \t]*(["']?)([^\s"'&,;]{4,})`)
	})
	credentialWords = [4]string{"key", "token", "secret", "passw"}
)

// knownSecrets holds the sources added by AddKnownSecrets: the slice is
// replaced, never changed, so Redact reads it without a lock.
var (
	knownMu      sync.Mutex
	knownSecrets atomic.Pointer[[]*func() []string]
)

// AddKnownSecrets adds a source of exact secret values (the keys of a
// credential vault) that Redact masks wherever they occur, besides what it
// recognises by form, until the returned function removes it. Values
// shorter than MinKnownSecretLen bytes are ignored. secrets is called on
// every Redact, concurrently: it must be cheap and safe for concurrent
// use. Every host of the process adds its own vault.
func AddKnownSecrets(secrets func() []string) (remove func()) {
	src := &secrets
	knownMu.Lock()
	defer knownMu.Unlock()
	var cur []*func() []string
	if p := knownSecrets.Load(); p != nil {
		cur = *p
	}
	next := append(slices.Clip(cur), src)
	knownSecrets.Store(&next)
	var once sync.Once
	return func() {
		once.Do(func() {
			knownMu.Lock()
			defer knownMu.Unlock()
			next := slices.DeleteFunc(slices.Clone(*knownSecrets.Load()), func(p *func() []string) bool { return p == src })
			knownSecrets.Store(&next)
		})
	}
}

// Redact masks secrets in s with "[REDACTED]": the known secret values
// (AddKnownSecrets), provider API keys (sk-…), bearer tokens, AWS access
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
		s = privateKeyBlock().ReplaceAllString(s, wireredact.Marker)
	}
	s = redactCredentialValues(s, asciiLower(s))
	for _, r := range tokenRules() {
		s = r.redact(s)
	}
	return redactHexRuns(s)
}

// tokenRule is a credential recognised by its form: a match of re (which
// is anchored) that starts with prefix (at a word boundary unless inWord). Matches are
// found by searching for prefix, so that text without it costs one
// strings.Index, and a prefix inside a word costs nothing more.
type tokenRule struct {
	prefix string
	fold   bool // prefix (lower case) and re ignore ASCII case
	inWord bool // a match may start inside a word
	re     *regexp.Regexp
}

// redact masks the matches of r in s.
func (r tokenRule) redact(s string) string {
	hay := s
	if r.fold {
		hay = asciiLower(s)
	}
	var b strings.Builder
	copied := 0
	for pos := 0; pos < len(s); {
		i := strings.Index(hay[pos:], r.prefix)
		if i < 0 {
			break
		}
		start := pos + i
		pos = start + 1
		if !r.inWord && start > 0 && isWordByte(s[start-1]) {
			continue
		}
		m := r.re.FindStringIndex(s[start:])
		if m == nil {
			continue
		}
		b.WriteString(s[copied:start])
		b.WriteString(wireredact.Marker)
		copied = start + m[1]
		pos = copied
	}
	if copied == 0 {
		return s
	}
	b.WriteString(s[copied:])
	return b.String()
}

// isWordByte reports whether c is an ASCII word character, as regexp's
// \b counts them.
func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

// redactKnown masks the known secret values that occur in s, longest
// first, so that a secret holding another is masked whole.
func redactKnown(s string) string {
	srcs := knownSecrets.Load()
	if srcs == nil {
		return s
	}
	var found []string
	for _, src := range *srcs {
		for _, v := range (*src)() {
			if len(v) >= MinKnownSecretLen && !strings.Contains(v, wireredact.Marker) && strings.Contains(s, v) {
				found = append(found, v)
			}
		}
	}
	if len(found) > 1 {
		slices.SortFunc(found, func(a, b string) int { return len(b) - len(a) })
	}
	for _, v := range found {
		s = strings.ReplaceAll(s, v, wireredact.Marker)
	}
	return s
}

// redactHexRuns masks runs of 40 or more hex digits, except git object
// ids: runs of exactly 40 or 64 lower-case hex digits.
func redactHexRuns(s string) string {
	var b strings.Builder
	copied := 0
	for i := 0; i < len(s); {
		if !isHexByte(s[i]) {
			i++
			continue
		}
		j := i + 1
		for j < len(s) && isHexByte(s[j]) {
			j++
		}
		if j-i >= 40 && !isObjectID(s[i:j]) {
			b.WriteString(s[copied:i])
			b.WriteString(wireredact.Marker)
			copied = j
		}
		i = j
	}
	if copied == 0 {
		return s
	}
	b.WriteString(s[copied:])
	return b.String()
}

func isHexByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// isObjectID reports whether h, a run of hex digits, is a git object id
// (SHA-1 or SHA-256, lower case).
func isObjectID(h string) bool {
	if len(h) != 40 && len(h) != 64 {
		return false
	}
	return strings.IndexFunc(h, func(r rune) bool { return r >= 'A' && r <= 'F' }) < 0
}

// credentialKeyStarts are the words a credential key of credentialValue
// starts with.
var credentialKeyStarts = []string{"api", "secret", "access", "private", "auth", "refresh", "session", "client", "passw"}

// startsCredentialKey reports whether s starts with one of
// credentialKeyStarts.
func startsCredentialKey(s string) bool {
	for _, w := range credentialKeyStarts {
		if strings.HasPrefix(s, w) {
			return true
		}
	}
	return false
}

// credentialReach is how far before one of credentialWords a credential
// key can start ("private_" of "private_key").
const credentialReach = 8

// redactCredentialValues masks the values of credential assignments; lower
// is s in ASCII lower case, which the pattern runs on. The pattern is only
// tried, anchored, just before each occurrence of one of credentialWords.
// A match counts when its key is a whole key (see isCredentialKey) and its
// value is a secret: any value of '=' or of a quoted ':' form, else a value
// that looks like one (see looksSecret).
func redactCredentialValues(s, lower string) string {
	var b strings.Builder
	copied := 0 // s[:copied] is already in b
	// at[i] is the next offset of credentialWords[i] at or after pos
	// (-1: none left), so that each word is searched for once per hit.
	var at [len(credentialWords)]int
	for i, w := range credentialWords {
		at[i] = strings.Index(lower, w)
	}
	for pos := 0; pos < len(s); {
		next := -1
		for i, w := range credentialWords {
			if at[i] >= 0 && at[i] < pos {
				if j := strings.Index(lower[pos:], w); j >= 0 {
					at[i] = pos + j
				} else {
					at[i] = -1
				}
			}
			if at[i] >= 0 && (next < 0 || at[i] < next) {
				next = at[i]
			}
		}
		if next < 0 {
			break
		}
		pos = next + 1
		for k := max(next-credentialReach, copied); k <= next; k++ {
			if !startsCredentialKey(lower[k:]) || !isCredentialKey(s, k) {
				continue
			}
			m := credentialValue().FindStringSubmatchIndex(lower[k:])
			if m == nil {
				continue
			}
			for i := range m {
				if m[i] >= 0 {
					m[i] += k
				}
			}
			sep, quoted := s[m[6]:m[7]], m[9] > m[8]
			valStart, valEnd := m[10], m[11]
			val := s[valStart:valEnd]
			if val == wireredact.Marker || (sep == ":" && !quoted && !looksSecret(val)) {
				continue
			}
			b.WriteString(s[copied:valStart])
			b.WriteString(wireredact.Marker)
			copied, pos = valEnd, valEnd
			break
		}
	}
	if copied == 0 {
		return s
	}
	b.WriteString(s[copied:])
	return b.String()
}

// isCredentialKey reports whether the credential keyword at line[i:] ends
// a whole key: the identifier it ends is not a path component (it does
// not follow '/' or '\'), and the keyword is the identifier or its last
// part (after '_', '-', '.' or a camelCase boundary).
func isCredentialKey(line string, i int) bool {
	start := i
	for start > 0 && i-start < maxKeyLen && isKeyByte(line[start-1]) {
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

// maxKeyLen bounds how far isCredentialKey looks back for the start of a
// key; a longer identifier counts as a key.
const maxKeyLen = 256

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
