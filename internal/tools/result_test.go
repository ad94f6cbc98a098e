package tools

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/maka-agent/maka/protocol"
)

func TestRedact(t *testing.T) {
	tests := []struct {
		name, in string
		gone     []string // must not survive
		keep     []string // must survive
	}{
		{"openai key", "key sk-abcdefghijklmnopqrstuvwx end", []string{"sk-abcdefghijklmnop"}, []string{"key ", " end"}},
		{"anthropic key", "sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAA", []string{"AAAAAAAAAAAAAAAA"}, nil},
		{"bearer", "Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123", []string{"abcdefghijklmnopqrstuvwxyz"}, []string{"Authorization"}},
		{"aws", "id=AKIAIOSFODNN7EXAMPLE", []string{"AKIAIOSFODNN7EXAMPLE"}, []string{"id="}},
		{"api_key assignment", "export API_KEY=hunter2hunter2", []string{"hunter2"}, []string{"API_KEY="}},
		{"openai env", "OPENAI_API_KEY='abc123def'", []string{"abc123def"}, []string{"OPENAI_API_KEY"}},
		{"json password", `{"password": "s3cr3tpw"}`, []string{"s3cr3tpw"}, []string{"password"}},
		{"private key block", "a\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nabc\n-----END RSA PRIVATE KEY-----\nb",
			[]string{"MIIEowIBAAKCAQEA", "abc"}, []string{"a\n", "\nb"}},
		{"unterminated private key", "-----BEGIN PRIVATE KEY-----\nMIIEsecret", []string{"MIIEsecret"}, nil},
		{"github token", "ghp_0123456789abcdefghij0123", []string{"ghp_0123456789"}, nil},
		{"plain text", "hello world, api docs, tokenizer", nil, []string{"hello world, api docs, tokenizer"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Redact(tt.in)
			for _, g := range tt.gone {
				if strings.Contains(got, g) {
					t.Errorf("Redact(%q) = %q still contains %q", tt.in, got, g)
				}
			}
			for _, k := range tt.keep {
				if !strings.Contains(got, k) {
					t.Errorf("Redact(%q) = %q lost %q", tt.in, got, k)
				}
			}
			if len(tt.gone) > 0 && !strings.Contains(got, "[REDACTED]") {
				t.Errorf("Redact(%q) = %q has no marker", tt.in, got)
			}
			if again := Redact(got); again != got {
				t.Errorf("Redact is not idempotent: %q then %q", got, again)
			}
			if protocol.RedactSecrets(got) != got {
				t.Errorf("Redact(%q) = %q is changed by protocol.RedactSecrets", tt.in, got)
			}
		})
	}
}

func TestErrorResult(t *testing.T) {
	long := strings.Repeat("é", MaxErrorChars+100)
	r := ErrorResult("boom sk-abcdefghijklmnopqrstuvwx " + long)
	if !r.IsError {
		t.Fatal("not an error")
	}
	msg := text(t, r)
	if strings.Contains(msg, "sk-abc") {
		t.Errorf("secret not redacted: %.60q", msg)
	}
	if n := utf8.RuneCountInString(msg); n != MaxErrorChars {
		t.Errorf("length %d runes, want %d", n, MaxErrorChars)
	}
	if !utf8.ValidString(msg) || r.ModelText != msg {
		t.Errorf("model text differs or invalid UTF-8")
	}
}

func TestTextAndJSONResult(t *testing.T) {
	r := TextResult("hi")
	if r.IsError || text(t, r) != "hi" || r.ModelText != "hi" {
		t.Fatalf("TextResult = %+v", r)
	}
	j := JSONResult(map[string]any{"b": 1, "a": []string{"x"}})
	var c struct {
		Kind  string
		Value map[string]any
	}
	if err := json.Unmarshal(j.Content, &c); err != nil || c.Kind != "json" || c.Value["b"] != float64(1) {
		t.Fatalf("JSONResult content %s (%v)", j.Content, err)
	}
	if j.ModelText != `{"a":["x"],"b":1}` {
		t.Errorf("model text %q", j.ModelText)
	}
	bad := JSONResult(make(chan int))
	mustError(t, bad, "not encodable")
}

func TestSummary(t *testing.T) {
	bash, read, grep := byName(t, NameBash), byName(t, NameRead), byName(t, NameGrep)
	for _, tc := range []struct {
		tool Tool
		args string
		want string
	}{
		{bash, `{"command":"ls -la\n  && echo\tdone"}`, "ls -la && echo done"},
		{bash, `{"command":"curl -H 'Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123456789' x"}`, "curl -H 'Authorization: [REDACTED]' x"},
		{read, `{"path":"src/main.go"}`, "src/main.go"},
		{grep, `{"pattern":"func main","path":"cmd"}`, "func main in cmd"},
		{bash, `{"command":"` + strings.Repeat("é", 200) + `"}`, strings.Repeat("é", 126) + "…"},
	} {
		if got := Summary(tc.tool, json.RawMessage(tc.args)); got != tc.want {
			t.Errorf("Summary(%s, %s) = %q, want %q", tc.tool.Name(), tc.args, got, tc.want)
		}
		if got := Summary(tc.tool, json.RawMessage(tc.args)); len(got) > SummaryMaxBytes || !utf8.ValidString(got) {
			t.Errorf("summary %q is not a valid bounded string", got)
		}
	}
}
