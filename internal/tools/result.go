package tools

import (
	"encoding/json"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/maka-agent/maka/protocol"
)

// MaxErrorChars bounds the text of an error result, in characters.
const MaxErrorChars = 4000

// textContent is the content of a "text" result.
type textContent struct {
	Kind string `json:"kind"`
	Text string `json:"text"`
}

// jsonContent is the content of a "json" result.
type jsonContent struct {
	Kind  string `json:"kind"`
	Value any    `json:"value"`
}

// ErrorResult is a failed call whose content is {"kind":"text","text":msg};
// msg is redacted and cut to MaxErrorChars characters.
func ErrorResult(msg string) Result {
	msg = truncateChars(Redact(msg), MaxErrorChars)
	r := TextResult(msg)
	r.IsError = true
	return r
}

// TextResult is a successful call whose content is
// {"kind":"text","text":text}; the model reads text as is.
func TextResult(text string) Result {
	return Result{Content: mustMarshal(textContent{Kind: "text", Text: text}), ModelText: text}
}

// JSONResult is a successful call whose content is
// {"kind":"json","value":value}; the model reads value as JSON. A value
// that cannot be encoded yields an error result.
func JSONResult(value any) Result {
	v, err := json.Marshal(value)
	if err != nil {
		return ErrorResult("result is not encodable as JSON: " + err.Error())
	}
	return Result{Content: mustMarshal(jsonContent{Kind: "json", Value: json.RawMessage(v)}), ModelText: string(v)}
}

// contentResult is a result with a custom content object and model text.
func contentResult(content any, modelText string, isError bool) Result {
	return Result{Content: mustMarshal(content), ModelText: modelText, IsError: isError}
}

// mustMarshal encodes values built by this package from plain structs,
// strings and numbers, which cannot fail to encode.
func mustMarshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic("tools: encoding a result: " + err.Error())
	}
	return b
}

// truncateChars cuts s to at most n characters (runes).
func truncateChars(s string, n int) string {
	if len(s) <= n || utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for k := 0; k < n; k++ {
		_, w := utf8.DecodeRuneInString(s[i:])
		i += w
	}
	return s[:i]
}

// truncateBytes cuts s to at most n bytes without splitting a UTF-8
// sequence.
func truncateBytes(s string, n int) string { return protocol.TruncateUTF8(s, n) }

// Patterns that complement protocol.RedactSecrets: whole private key
// blocks and the values of key=value / key: value credential assignments.
// credentialValue never crosses a line, so it only runs on lines that
// mention one of credentialWords.
var (
	privateKeyBlock = regexp.MustCompile(`(?s)-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\z)`)
	credentialValue = regexp.MustCompile(`(?i)((?:api|secret|access|private)[_-]?key|(?:access|auth|refresh|session)[_-]?token|client[_-]?secret|password|passwd)(["']?[ \t]*[:=][ \t]*["']?)([^\s"'&,;]{4,})`)
	credentialWords = []string{"key", "token", "secret", "passw"}
)

// Redact masks obvious secrets in s with "[REDACTED]": provider API keys
// (sk-…), bearer tokens, AWS access key ids (AKIA…), GitHub and Slack
// tokens, Google API keys, long hex runs, private key blocks and the values
// of assignments such as api_key=… or "password": "…". It is a superset of
// protocol.RedactSecrets, so redacted text is stable under it.
func Redact(s string) string {
	if strings.Contains(s, "PRIVATE KEY-----") {
		s = privateKeyBlock.ReplaceAllString(s, protocol.RedactedMarker)
	}
	s = redactCredentialValues(s)
	return protocol.RedactSecrets(s)
}

// redactCredentialValues masks the values of credential assignments,
// running the pattern only on the lines that can hold one.
func redactCredentialValues(s string) string {
	lower := asciiLower(s)
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
		masked := credentialValue.ReplaceAllStringFunc(line, func(m string) string {
			sub := credentialValue.FindStringSubmatch(m)
			if sub[3] == protocol.RedactedMarker {
				return m
			}
			return sub[1] + sub[2] + protocol.RedactedMarker
		})
		if masked != line {
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
