package tools

import (
	"encoding/json"
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
