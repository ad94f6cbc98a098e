package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Kind is the JSON type of a Value.
type Kind uint8

// JSON value kinds.
const (
	KindNull Kind = iota
	KindBool
	KindNumber
	KindString
	KindArray
	KindObject
)

func (k Kind) String() string {
	switch k {
	case KindNull:
		return "null"
	case KindBool:
		return "boolean"
	case KindNumber:
		return "number"
	case KindString:
		return "string"
	case KindArray:
		return "array"
	default:
		return "object"
	}
}

// Value is a parsed JSON value with the semantics of JavaScript's JSON.parse:
// numbers are IEEE doubles, duplicate object keys keep the last value (at the
// position of the first occurrence), and strings are Go strings. A lone UTF-16
// surrogate escape (\ud800) becomes U+FFFD, which has the same UTF-16 length.
type Value struct {
	kind Kind
	b    bool
	n    float64
	s    string
	arr  []Value
	obj  []Member
}

// Member is one key of a JSON object.
type Member struct {
	Key   string
	Value Value
}

// Kind reports the JSON type of v.
func (v Value) Kind() Kind { return v.kind }

// Bool returns the boolean of a KindBool value.
func (v Value) Bool() bool { return v.b }

// Number returns the double of a KindNumber value.
func (v Value) Number() float64 { return v.n }

// Str returns the string of a KindString value.
func (v Value) Str() string { return v.s }

// Array returns the elements of a KindArray value.
func (v Value) Array() []Value { return v.arr }

// Members returns the keys of a KindObject value in first-occurrence order.
func (v Value) Members() []Member { return v.obj }

// Get returns the value of key in an object.
func (v Value) Get(key string) (Value, bool) {
	for i := range v.obj {
		if v.obj[i].Key == key {
			return v.obj[i].Value, true
		}
	}
	return Value{}, false
}

// StringValue, NumberValue, ... build values (used by tests and encoders).
func StringValue(s string) Value     { return Value{kind: KindString, s: s} }
func NumberValue(n float64) Value    { return Value{kind: KindNumber, n: n} }
func BoolValue(b bool) Value         { return Value{kind: KindBool, b: b} }
func NullValue() Value               { return Value{} }
func ArrayValue(items []Value) Value { return Value{kind: KindArray, arr: items} }

// ObjectValue builds an object; later duplicates replace earlier ones.
func ObjectValue(members ...Member) Value {
	v := Value{kind: KindObject}
	for _, m := range members {
		v.obj = setMember(v.obj, m.Key, m.Value)
	}
	return v
}

func setMember(obj []Member, key string, val Value) []Member {
	for i := range obj {
		if obj[i].Key == key {
			obj[i].Value = val
			return obj
		}
	}
	return append(obj, Member{Key: key, Value: val})
}

// MarshalJSON encodes v compactly, the way JSON.stringify would.
func (v Value) MarshalJSON() ([]byte, error) { return appendValue(nil, v), nil }

func appendValue(b []byte, v Value) []byte {
	switch v.kind {
	case KindNull:
		return append(b, "null"...)
	case KindBool:
		if v.b {
			return append(b, "true"...)
		}
		return append(b, "false"...)
	case KindNumber:
		return appendNumber(b, v.n)
	case KindString:
		return appendString(b, v.s)
	case KindArray:
		b = append(b, '[')
		for i, e := range v.arr {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendValue(b, e)
		}
		return append(b, ']')
	default:
		b = append(b, '{')
		for i, m := range v.obj {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, m.Key)
			b = append(b, ':')
			b = appendValue(b, m.Value)
		}
		return append(b, '}')
	}
}

// appendNumber formats like JavaScript's Number.prototype.toString for
// finite values (JSON.stringify writes null for non-finite ones).
func appendNumber(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	if f == 0 {
		return append(b, '0')
	}
	abs := math.Abs(f)
	fmtc := byte('f')
	if abs < 1e-6 || abs >= 1e21 {
		fmtc = 'e'
	}
	b = strconv.AppendFloat(b, f, fmtc, -1, 64)
	if fmtc == 'e' {
		// clean up e-09 to e-9
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

const hexDigits = "0123456789abcdef"

// appendString escapes like JSON.stringify: only '"', '\\' and C0 controls.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// ErrInvalidJSON is returned by Parse for text that JSON.parse would reject.
var ErrInvalidJSON = errors.New("invalid JSON")

// maxDepth bounds nesting so hostile input cannot exhaust the stack.
const maxDepth = 512

// Parse parses one JSON text (surrounding whitespace allowed). The input
// must be valid UTF-8; invalid bytes are rejected.
func Parse(data []byte) (Value, error) {
	p := new(parser)
	p.data, p.pos = data, 0
	p.skipSpace()
	v, err := p.value(0)
	if err != nil {
		return Value{}, err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return Value{}, ErrInvalidJSON
	}
	return v, nil
}

type parser struct {
	data []byte
	pos  int
	// scratch stacks: members and elements are collected here and copied
	// into one exactly-sized slice when their object or array closes.
	members  []Member
	elements []Value
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) (Value, error) {
	if depth > maxDepth || p.pos >= len(p.data) {
		return Value{}, ErrInvalidJSON
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, err := p.str()
		return Value{kind: KindString, s: s}, err
	case c == 't':
		return p.literal("true", Value{kind: KindBool, b: true})
	case c == 'f':
		return p.literal("false", Value{kind: KindBool})
	case c == 'n':
		return p.literal("null", Value{})
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return Value{}, ErrInvalidJSON
	}
}

func (p *parser) literal(word string, v Value) (Value, error) {
	if !bytes.HasPrefix(p.data[p.pos:], []byte(word)) {
		return Value{}, ErrInvalidJSON
	}
	p.pos += len(word)
	return v, nil
}

func (p *parser) object(depth int) (Value, error) {
	p.pos++ // {
	start := len(p.members)
	defer func() { p.members = p.members[:start] }()
	v := Value{kind: KindObject, obj: []Member{}}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return v, nil
	}
	for {
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return Value{}, ErrInvalidJSON
		}
		key, err := p.key()
		if err != nil {
			return Value{}, err
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return Value{}, ErrInvalidJSON
		}
		p.pos++
		p.skipSpace()
		val, err := p.value(depth + 1)
		if err != nil {
			return Value{}, err
		}
		dup := false
		for i := start; i < len(p.members); i++ {
			if p.members[i].Key == key { // JSON.parse: the last value wins
				p.members[i].Value, dup = val, true
				break
			}
		}
		if !dup {
			p.members = append(p.members, Member{Key: key, Value: val})
		}
		p.skipSpace()
		if p.pos >= len(p.data) {
			return Value{}, ErrInvalidJSON
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			v.obj = append(make([]Member, 0, len(p.members)-start), p.members[start:]...)
			return v, nil
		default:
			return Value{}, ErrInvalidJSON
		}
	}
}

func (p *parser) array(depth int) (Value, error) {
	p.pos++ // [
	start := len(p.elements)
	defer func() { p.elements = p.elements[:start] }()
	v := Value{kind: KindArray, arr: []Value{}}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return v, nil
	}
	for {
		p.skipSpace()
		e, err := p.value(depth + 1)
		if err != nil {
			return Value{}, err
		}
		p.elements = append(p.elements, e)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return Value{}, ErrInvalidJSON
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			v.arr = append(make([]Value, 0, len(p.elements)-start), p.elements[start:]...)
			return v, nil
		default:
			return Value{}, ErrInvalidJSON
		}
	}
}

// internedKeys are protocol field names; object keys equal to one of them
// reuse its string instead of allocating.
var internedKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		"requestId", "operation", "input", "kind", "ok", "result", "error", "code", "message",
		"sessionId", "turnId", "runId", "content", "text", "hostEpoch", "subscriptionId", "sequence",
		"clientInstanceId", "surface", "protocolMin", "protocolMax", "state", "messageId", "placement",
		"originHostEpoch", "interactionId", "answer", "snapshot", "delta", "event", "status",
	} {
		m[k] = k
	}
	_ = defined             // the operation table is complete
	for op := range table { // operation names, for request envelopes
		m[string(op)] = string(op)
	}
	return m
}()

// key parses an object key, interning protocol field names.
func (p *parser) key() (string, error) {
	d := p.data
	i := p.pos + 1
	for i < len(d) && d[i] != '"' && d[i] != '\\' && d[i] >= 0x20 {
		i++
	}
	if i < len(d) && d[i] == '"' {
		if k, ok := internedKeys[string(d[p.pos+1:i])]; ok {
			p.pos = i + 1
			return k, nil
		}
	}
	return p.str()
}

func (p *parser) number() (Value, error) {
	start := p.pos
	d := p.data
	if d[p.pos] == '-' {
		p.pos++
	}
	if p.pos >= len(d) {
		return Value{}, ErrInvalidJSON
	}
	if d[p.pos] == '0' {
		p.pos++
	} else if d[p.pos] >= '1' && d[p.pos] <= '9' {
		for p.pos < len(d) && d[p.pos] >= '0' && d[p.pos] <= '9' {
			p.pos++
		}
	} else {
		return Value{}, ErrInvalidJSON
	}
	if p.pos < len(d) && d[p.pos] == '.' {
		p.pos++
		if p.pos >= len(d) || d[p.pos] < '0' || d[p.pos] > '9' {
			return Value{}, ErrInvalidJSON
		}
		for p.pos < len(d) && d[p.pos] >= '0' && d[p.pos] <= '9' {
			p.pos++
		}
	}
	if p.pos < len(d) && (d[p.pos] == 'e' || d[p.pos] == 'E') {
		p.pos++
		if p.pos < len(d) && (d[p.pos] == '+' || d[p.pos] == '-') {
			p.pos++
		}
		if p.pos >= len(d) || d[p.pos] < '0' || d[p.pos] > '9' {
			return Value{}, ErrInvalidJSON
		}
		for p.pos < len(d) && d[p.pos] >= '0' && d[p.pos] <= '9' {
			p.pos++
		}
	}
	text := d[start:p.pos]
	// Fast path for short integers, the overwhelmingly common case.
	if len(text) <= 15 {
		neg := text[0] == '-'
		digits := text
		if neg {
			digits = text[1:]
		}
		var n int64
		ok := true
		for _, c := range digits {
			if c < '0' || c > '9' {
				ok = false
				break
			}
			n = n*10 + int64(c-'0')
		}
		if ok {
			f := float64(n)
			if neg {
				f = -f
			}
			return Value{kind: KindNumber, n: f}, nil
		}
	}
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return Value{}, ErrInvalidJSON
	}
	return Value{kind: KindNumber, n: f}, nil
}

func (p *parser) str() (string, error) {
	p.pos++ // opening quote
	d := p.data
	start := p.pos
	// Fast path: no escapes, all printable ASCII or valid UTF-8.
	for p.pos < len(d) {
		c := d[p.pos]
		if c == '"' {
			s := d[start:p.pos]
			p.pos++
			if !utf8.Valid(s) {
				return "", ErrInvalidJSON
			}
			return string(s), nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
		p.pos++
	}
	buf := make([]byte, 0, p.pos-start+16)
	buf = append(buf, d[start:p.pos]...)
	for p.pos < len(d) {
		c := d[p.pos]
		switch {
		case c == '"':
			p.pos++
			if !utf8.Valid(buf) {
				return "", ErrInvalidJSON
			}
			return string(buf), nil
		case c < 0x20:
			return "", ErrInvalidJSON
		case c == '\\':
			p.pos++
			if p.pos >= len(d) {
				return "", ErrInvalidJSON
			}
			e := d[p.pos]
			p.pos++
			switch e {
			case '"', '\\', '/':
				buf = append(buf, e)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return "", ErrInvalidJSON
				}
				if utf16.IsSurrogate(r) {
					r2 := utf8.RuneError
					if r < 0xdc00 && p.pos+6 <= len(d) && d[p.pos] == '\\' && d[p.pos+1] == 'u' {
						save := p.pos
						p.pos += 2
						lo, ok := p.hex4()
						if ok && lo >= 0xdc00 && lo <= 0xdfff {
							r2 = utf16.DecodeRune(r, lo)
						} else {
							p.pos = save
						}
					}
					r = r2
				}
				buf = utf8.AppendRune(buf, r)
			default:
				return "", ErrInvalidJSON
			}
		default:
			buf = append(buf, c)
			p.pos++
		}
	}
	return "", ErrInvalidJSON
}

func (p *parser) hex4() (rune, bool) {
	if p.pos+4 > len(p.data) {
		return 0, false
	}
	var r rune
	for _, c := range p.data[p.pos : p.pos+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	p.pos += 4
	return r, true
}

// JSONAppender is implemented by types with a hand-written encoder; it must
// produce exactly what Marshal would.
type JSONAppender interface {
	AppendJSON(b []byte) []byte
}

// Marshal encodes v as compact JSON with JSON.stringify's escaping rules (no
// HTML escaping, U+2028/U+2029 written raw), so that encoded sizes match the
// original host's byte for byte. Struct types use encoding/json tags.
func Marshal(v any) ([]byte, error) {
	return AppendMarshal(nil, v)
}

// AppendMarshal appends the encoding of v to b.
func AppendMarshal(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case Value:
		return appendValue(b, x), nil
	case *Value:
		return appendValue(b, *x), nil
	case JSONAppender:
		return x.AppendJSON(b), nil
	}
	buf := new(bytes.Buffer)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return b, err
	}
	out := buf.Bytes()
	out = out[:len(out)-1] // Encode appends '\n'
	return appendUnescapeLineSeparators(b, out), nil
}

// appendUnescapeLineSeparators copies encoding/json output, turning its
// mandatory \u2028 and \u2029 escapes back into raw characters.
func appendUnescapeLineSeparators(dst, src []byte) []byte {
	if !bytes.Contains(src, []byte(`\u202`)) {
		return append(dst, src...)
	}
	for i := 0; i < len(src); i++ {
		c := src[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		if i+5 < len(src) && src[i+1] == 'u' && src[i+2] == '2' && src[i+3] == '0' && src[i+4] == '2' &&
			(src[i+5] == '8' || src[i+5] == '9') {
			dst = append(dst, 0xe2, 0x80, 0xa8+(src[i+5]-'8'))
			i += 5
			continue
		}
		// any other escape: copy the backslash and the escaped byte
		dst = append(dst, c)
		if i+1 < len(src) {
			i++
			dst = append(dst, src[i])
		}
	}
	return dst
}

// EncodedSize returns the length of Marshal(v), or an error.
func EncodedSize(v any) (int, error) {
	b, err := Marshal(v)
	return len(b), err
}

// isJSWhitespace reports whether r is in JavaScript's \s class (the set
// String.prototype.trim removes).
func isJSWhitespace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000, 0xfeff:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

// jsTrim removes leading and trailing white space and line terminators as
// JavaScript's String.prototype.trim does.
func jsTrim(s string) string {
	return strings.TrimFunc(s, isJSWhitespace)
}

// UTF16Len returns the length of s in UTF-16 code units (JavaScript's
// String.prototype.length).
func UTF16Len(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			n++
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// TruncateUTF8 cuts s to at most n bytes without splitting a UTF-8
// sequence (the wire's byte bounds are on code-point boundaries).
func TruncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
