package protocol

import (
	"math"
	"strings"
	"testing"
)

func TestParseFollowsJSONParseSemantics(t *testing.T) {
	cases := []struct {
		in   string
		want string // re-encoded
	}{
		{`{"a":1,"a":2}`, `{"a":2}`},                 // last duplicate wins
		{`{"a":1,"b":2,"a":3}`, `{"a":3,"b":2}`},     // at the first position
		{` [1 , 2.5e0, -0, 1E2 ] `, `[1,2.5,0,100]`}, // whitespace, number forms
		{`"\u00e9\ud83d\ude00\/"`, `"é😀/"`},          // escapes and surrogate pairs
		{`"\ud800x"`, "\"\uFFFDx\""},                 // lone surrogate
		{`"\u2028"`, "\"\u2028\""},                   // raw line separator out
		{`"a\u0000\u001f\b\f\n\r\t"`, `"a\u0000\u001f\b\f\n\r\t"`},
		{`"<>&\u007f"`, "\"<>&\u007f\""}, // no HTML escaping
		{`1e400`, `null`},                // overflow is Infinity; JSON.stringify writes null
		{`{}`, `{}`},
		{`[]`, `[]`},
		{`true`, `true`},
		{`null`, `null`},
	}
	for _, c := range cases {
		v, err := Parse([]byte(c.in))
		if err != nil {
			t.Errorf("Parse(%s): %v", c.in, err)
			continue
		}
		got, _ := Marshal(v)
		if string(got) != c.want {
			t.Errorf("Parse(%s) re-encodes to %s, want %s", c.in, got, c.want)
		}
	}
}

func TestParseRejectsWhatJSONParseRejects(t *testing.T) {
	for _, in := range []string{
		``, ` `, `{`, `[1,]`, `{"a":1,}`, `01`, `1.`, `.5`, `+1`, `1e`, `-`, `"\x"`, `"\u12"`,
		"\"a\x01\"", `tru`, `nul`, `{"a" 1}`, `{a:1}`, `[1 2]`, `"unterminated`, `1 2`, `NaN`, `Infinity`,
		"'a'", "\"\xff\"",
	} {
		if _, err := Parse([]byte(in)); err == nil {
			t.Errorf("Parse(%q) succeeded", in)
		}
	}
}

func TestParseBoundsNesting(t *testing.T) {
	deep := strings.Repeat("[", maxDepth+2) + strings.Repeat("]", maxDepth+2)
	if _, err := Parse([]byte(deep)); err == nil {
		t.Fatal("nesting beyond the bound was accepted")
	}
	ok := strings.Repeat("[", 100) + strings.Repeat("]", 100)
	if _, err := Parse([]byte(ok)); err != nil {
		t.Fatal(err)
	}
}

func TestMarshalMatchesJSONStringify(t *testing.T) {
	type s struct {
		A string  `json:"a"`
		B float64 `json:"b"`
		C *int    `json:"c"`
	}
	cases := []struct {
		v    any
		want string
	}{
		{s{A: "<tag>&\u2028\u2029", B: 1e21}, "{\"a\":\"<tag>&\u2028\u2029\",\"b\":1e+21,\"c\":null}"},
		{s{A: `\u2028`, B: 0.000001}, `{"a":"\\u2028","b":0.000001,"c":null}`},
		{s{A: "\\\u2028", B: 1e-7}, "{\"a\":\"\\\\\u2028\",\"b\":1e-7,\"c\":null}"},
		{"\x00\x1f\x7f", `"\u0000\u001f` + "\x7f\""},
		{StringValue("\b\f"), `"\b\f"`},
		{NumberValue(123456789012345), `123456789012345`},
		{NumberValue(-1.5), `-1.5`},
		{NumberValue(math.Inf(1)), `null`},
		{NumberValue(1e21), `1e+21`},
		{NumberValue(1.5e-7), `1.5e-7`},
	}
	for _, c := range cases {
		got, err := Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != c.want {
			t.Errorf("Marshal(%#v) = %s, want %s", c.v, got, c.want)
		}
	}
}

func TestUTF16Len(t *testing.T) {
	for s, n := range map[string]int{"": 0, "abc": 3, "é": 1, "客户端": 3, "😀": 2, "a😀b": 4} {
		if got := UTF16Len(s); got != n {
			t.Errorf("UTF16Len(%q) = %d, want %d", s, got, n)
		}
	}
}

func TestSafeIntegerChecksAreValueBased(t *testing.T) {
	d := &D{}
	for _, in := range []string{`1.0`, `1e2`, `-0`, `9007199254740991`} {
		v, _ := Parse([]byte(in))
		d.Count(v, "x")
	}
	if d.Err() != nil {
		t.Fatal(d.Err())
	}
	for _, in := range []string{`1.5`, `-1`, `9007199254740992`, `"1"`, `1e400`} {
		d := &D{}
		v, _ := Parse([]byte(in))
		d.Count(v, "x")
		if d.Err() == nil {
			t.Errorf("Count accepted %s", in)
		}
	}
}

func TestTruncateUTF8(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abc", 2, "ab"},
		{"aé", 2, "a"}, // é is two bytes: never split
		{"éé", 3, "é"},
		{"é", 0, ""},
	} {
		if got := TruncateUTF8(tc.s, tc.n); got != tc.want {
			t.Errorf("TruncateUTF8(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}
