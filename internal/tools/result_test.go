package tools

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestRedact(t *testing.T) {
	tests := []struct {
		name, in string
		gone     []string // must not survive
		keep     []string // must survive
	}{
		{"openai key", "key sk-abcdefghijklmnopqrstuvwx end", []string{"sk-abcdefghijklmnop"}, []string{"key ", " end"}},
		{"anthropic key", "sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAA", []string{"AAAAAAAAAAAAAAAA"}, nil},
		{"key after equals", "OPENAI=sk-abcdefghijklmnopqrstuvwx", []string{"sk-abcdefghijklmnop"}, []string{"OPENAI="}},
		{"bearer", "Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123", []string{"abcdefghijklmnopqrstuvwxyz"}, []string{"Authorization"}},
		{"aws", "id=AKIAIOSFODNN7EXAMPLE", []string{"AKIAIOSFODNN7EXAMPLE"}, []string{"id="}},
		{"api_key assignment", "export API_KEY=hunter2hunter2", []string{"hunter2"}, []string{"API_KEY="}},
		{"openai env", "OPENAI_API_KEY='abc123def'", []string{"abc123def"}, []string{"OPENAI_API_KEY"}},
		{"camel case key", `apiKey = "abc123def"`, []string{"abc123def"}, []string{"apiKey"}},
		{"json password", `{"password": "s3cr3tpw"}`, []string{"s3cr3tpw"}, []string{"password"}},
		{"json api key of a vault", `{"openai": {"api_key": "abcdefgh"}}`, []string{"abcdefgh"}, []string{`"api_key": "`}},
		{"yaml secret value", "client_secret: Zx81kPq0aa", []string{"Zx81kPq0aa"}, []string{"client_secret: "}},
		{"yaml quoted value", "password: 'plain'", []string{"plain"}, []string{"password: '"}},
		{"assignment inside a rejected one", "/etc/passwd: password=hunter22", []string{"hunter22"}, []string{"/etc/passwd: password="}},
		{"private key block", "a\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nabc\n-----END RSA PRIVATE KEY-----\nb",
			[]string{"MIIEowIBAAKCAQEA", "abc"}, []string{"a\n", "\nb"}},
		{"unterminated private key", "-----BEGIN PRIVATE KEY-----\nMIIEsecret", []string{"MIIEsecret"}, nil},
		{"github token", "ghp_0123456789abcdefghij0123", []string{"ghp_0123456789"}, nil},
		{"github fine-grained token", "github_pat_11ABCDEFG0123456789_abcdefghijklmnop", []string{"11ABCDEFG0123456789"}, nil},
		{"slack token", "xoxb-1234567890-abcdef", []string{"1234567890-abcdef"}, nil},
		{"long hex", "digest " + strings.Repeat("0123456789abcdef", 3), []string{"0123456789abcdef0123"}, []string{"digest "}},
		{"upper case sha", "id " + strings.Repeat("ABCDEF0123", 4), []string{"ABCDEF0123ABCDEF"}, []string{"id "}},
		{"hex credential value", "secret_key=" + strings.Repeat("0123456789", 4), []string{"0123456789"}, []string{"secret_key="}},
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
		})
	}
}

// TestRedactKeepsOrdinaryText checks that text that only looks like a
// secret in part reaches the model as it is.
func TestRedactKeepsOrdinaryText(t *testing.T) {
	for _, in := range []string{
		"Read /etc/passwd: path is outside the workspace",
		"Read ../../etc/passwd: file not found: etc/passwd",
		"/home/me/projects/task-management-dashboard-service/src/main.go",
		"disk-usage-summary-for-every-volume-mounted",
		"commit 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nAuthor: A <a@example.com>",
		"sha256 " + strings.Repeat("0123456789abcdef", 4) + "  go.sum",
		"~/.config/app/password: permission denied",
		"password: required",
		"Enter the password: ",
		"max_tokens=4096 tokenizer=bpe mypassword=notakey",
		"the api key is set in the settings",
	} {
		if got := Redact(in); got != in {
			t.Errorf("Redact(%q) = %q, want it unchanged", in, got)
		}
	}
}

// TestRedactKnownSecrets checks that the known secret values are masked
// wherever they occur, whatever they look like, and that short ones are
// not.
func TestRedactKnownSecrets(t *testing.T) {
	const key, longer = "plainwordsecret", "plainwordsecretplus"
	in := "config holds plainwordsecret and plainwordsecretplus; short abc"
	if got := Redact(in); got != in {
		t.Fatalf("without known secrets Redact(%q) = %q", in, got)
	}
	remove := AddKnownSecrets(func() []string { return []string{key, longer, "abc", ""} })
	t.Cleanup(remove)
	other := AddKnownSecrets(func() []string { return []string{"another-host-secret"} })
	if got := Redact("x another-host-secret y"); got != "x [REDACTED] y" {
		t.Errorf("a second host's vault: %q", got)
	}
	other()
	got := Redact(in)
	if want := "config holds [REDACTED] and [REDACTED]; short abc"; got != want {
		t.Errorf("Redact(%q) = %q, want %q", in, got, want)
	}
	if got := ErrorResult("failed: " + key).ModelText; got != "failed: [REDACTED]" {
		t.Errorf("error result %q keeps the known secret", got)
	}
	remove()
	if got := Redact(in); got != in {
		t.Errorf("after removing the source Redact(%q) = %q", in, got)
	}
}

// referenceTokens are the token rules of the redactor written as plain
// patterns; FuzzRedact checks the redactor against them.
var referenceTokens = []*regexp.Regexp{
	regexp.MustCompile(`\bsk-[A-Za-z0-9_-]{16,}`),
	regexp.MustCompile(`AIza[0-9A-Za-z_-]{35}`),
	regexp.MustCompile(`gh[pousr]_[A-Za-z0-9]{20,}`),
	regexp.MustCompile(`github_pat_[A-Za-z0-9_]{22,}`),
	regexp.MustCompile(`xox[abprs]-[A-Za-z0-9-]{10,}`),
	regexp.MustCompile(`AKIA[0-9A-Z]{16}`),
	regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9._~+/-]{20,}=*`),
}

var referenceHexRun = regexp.MustCompile(`[0-9a-fA-F]{40,}`)

// redactFuzzSecrets are the known secrets of FuzzRedact.
var redactFuzzSecrets = []string{"vaultkey-0123", "ED]]ED]]ED", "hunter2hunter2"}

// FuzzRedact checks that Redact is idempotent and leaves none of what it
// recognises: no known secret, no token pattern, no hex run that is not
// an object id, no credential value.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{
		"key sk-abcdefghijklmnopqrstuvwx end",
		"task-management-dashboard-service",
		"xghp_abcdefghijklmnopqrstuvwxyz0123456789",
		"/etc/passwd: password=hunter22",
		`{"api_key": "abcdefgh", "password":"x1"}`,
		"commit 4b825dc642cb6eb9a060e54bf8d69288fbee4904",
		strings.Repeat("a", 41) + "sk-" + strings.Repeat("b", 20),
		"-----BEGIN PRIVATE KEY-----\nabc",
		"vaultkey-0123vaultkey-0123 ED]]ED]]EDED]]ED]]ED",
		"Bearer abcdefghijklmnopqrstuvwxyz== AKIAIOSFODNN7EXAMPLE",
	} {
		f.Add(s)
	}
	f.Cleanup(AddKnownSecrets(func() []string { return redactFuzzSecrets }))
	f.Fuzz(func(t *testing.T, s string) {
		got := Redact(s)
		if again := Redact(got); again != got {
			t.Fatalf("Redact is not idempotent:\n%q\n%q\n%q", s, got, again)
		}
		for _, v := range redactFuzzSecrets {
			if strings.Contains(got, v) {
				t.Fatalf("Redact(%q) = %q keeps the known secret %q", s, got, v)
			}
		}
		for _, re := range referenceTokens {
			if m := re.FindString(got); m != "" {
				t.Fatalf("Redact(%q) = %q keeps %q", s, got, m)
			}
		}
		for _, h := range referenceHexRun.FindAllString(got, -1) {
			if !isObjectID(h) {
				t.Fatalf("Redact(%q) = %q keeps the hex run %q", s, got, h)
			}
		}
		if redactCredentialValues(got, asciiLower(got)) != got {
			t.Fatalf("Redact(%q) = %q keeps a credential value", s, got)
		}
	})
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

// TestRedactResult checks that every string of a result's content is
// redacted, escaped or not, while numbers and untouched strings keep their
// bytes and the content stays valid JSON.
func TestRedactResult(t *testing.T) {
	in := Result{
		Content: json.RawMessage(`{"kind":"json", "value": {"a\"sk-abcdefghijklmnopqrstuvwx":"x \"sk-abcdefghijklmnopqrstuvwx\" <y>",` +
			`"n":[1.50, "keep \u00e9", "\u0073k-abcdefghijklmnopqrstuvwx"]}}`),
		ModelText: "ghp_0123456789abcdefghij0123",
		IsError:   true,
	}
	got := RedactResult(in)
	want := `{"kind":"json", "value": {"a\"[REDACTED]":"x \"[REDACTED]\" <y>",` +
		`"n":[1.50, "keep \u00e9", "[REDACTED]"]}}`
	if string(got.Content) != want || !json.Valid(got.Content) {
		t.Errorf("content = %s\nwant      %s", got.Content, want)
	}
	if got.ModelText != "[REDACTED]" || !got.IsError {
		t.Errorf("result = %+v", got)
	}
	if bad := RedactResult(Result{Content: json.RawMessage(`not json sk-abcdefghijklmnopqrstuvwx`)}); string(bad.Content) != "not json [REDACTED]" {
		t.Errorf("content that is not JSON = %s", bad.Content)
	}
}

// FuzzRedactResult checks that redacting valid JSON content leaves valid
// JSON, and that redacting twice changes nothing more.
func FuzzRedactResult(f *testing.F) {
	f.Add(`{"kind":"text","text":"key sk-abcdefghijklmnopqrstuvwx"}`)
	f.Add(`["a\"b\\", {"\u0073k-abcdefghijklmnopqrstuvwx": 1e3}, null, "password=x1y2"]`)
	f.Fuzz(func(t *testing.T, s string) {
		if !json.Valid([]byte(s)) {
			return
		}
		got := RedactResult(Result{Content: json.RawMessage(s)})
		if !json.Valid(got.Content) {
			t.Fatalf("RedactResult(%s) = %s is not JSON", s, got.Content)
		}
		if again := RedactResult(got); string(again.Content) != string(got.Content) {
			t.Fatalf("RedactResult is not idempotent: %s then %s", got.Content, again.Content)
		}
	})
}

// BenchmarkRedact redacts a Read-sized output of ordinary code and texts
// built to make a careless redactor quadratic.
func BenchmarkRedact(b *testing.B) {
	n := ReadMaxBytes
	for name, s := range map[string]string{
		"code":       strings.Repeat("func (g *ghost) through(key string) error { return fmt.Errorf(\"high %s\", key) } // 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n", n/120),
		"words":      strings.Repeat("ask-", n/4),
		"keys":       strings.Repeat("api_key", n/7),
		"path keys":  "/passwd:" + strings.Repeat("xpasswd:", n/8),
		"key blocks": strings.Repeat("-----BEGIN PRIVATE KEY-----", n/27),
	} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(s)))
			for b.Loop() {
				Redact(s)
			}
		})
	}
}
