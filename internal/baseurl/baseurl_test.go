package baseurl

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Expected values follow the WHATWG URL standard (what `new URL(s).href`
// gives for these inputs).
var baseURLValid = []struct{ in, want string }{
	{"https://api.openai.com/v1", "https://api.openai.com/v1"},
	{"  HTTPS://API.OpenAI.com:443/v1  ", "https://api.openai.com/v1"},
	{"\u00a0\u3000https://x.example\ufeff\u2028", "https://x.example/"},
	{"\x01http://x.example\x1f", "http://x.example/"},
	{"http://localhost:11434/v1/", "http://localhost:11434/v1/"},
	{"http://example.com", "http://example.com/"},
	{"http://example.com:80/", "http://example.com/"},
	{"https://example.com:80/", "https://example.com:80/"},
	{"http://example.com:443/", "http://example.com:443/"},
	{"http://example.com:0080/a", "http://example.com/a"},
	{"http://example.com:/a", "http://example.com/a"},
	{"http://example.com:0/", "http://example.com:0/"},
	{"http://example.com:65535", "http://example.com:65535/"},
	{"http:example.com/a", "http://example.com/a"},
	{"http:/example.com/a", "http://example.com/a"},
	{`http:\\example.com\a\b`, "http://example.com/a/b"},
	{"http:///example.com", "http://example.com/"},
	{"http://example.com\\v1", "http://example.com/v1"},
	{"http://@example.com", "http://example.com/"},
	{"http://:@example.com", "http://example.com/"},
	{"http://ex%41mple.com", "http://example.com/"},
	{"http://exa\tm\nple.co\rm/", "http://example.com/"},
	{"http://example.com/a b", "http://example.com/a%20b"},
	{"http://example.com/ä/€", "http://example.com/%C3%A4/%E2%82%AC"},
	{"http://example.com/\x7f\x01a", "http://example.com/%7F%01a"},
	{`http://example.com/{x}^` + "`" + `|"<>`, "http://example.com/%7Bx%7D%5E%60|%22%3C%3E"},
	{"http://example.com/%zz/%41", "http://example.com/%zz/%41"},
	{"http://example.com/a/../b/./c", "http://example.com/b/c"},
	{"http://example.com/a/%2E%2e/b/%2e/c", "http://example.com/b/c"},
	{"http://example.com/a/.%2E", "http://example.com/"},
	{"http://example.com/a/..", "http://example.com/"},
	{"http://example.com/..", "http://example.com/"},
	{"http://example.com/a/.", "http://example.com/a/"},
	{"http://example.com/a//b/", "http://example.com/a//b/"},
	{"http://example.com/..a/...", "http://example.com/..a/..."},
	{"http://127.0.0.1:8080", "http://127.0.0.1:8080/"},
	{"http://0x7f.1/", "http://127.0.0.1/"},
	{"http://2130706433/", "http://127.0.0.1/"},
	{"http://0177.0.0.1/", "http://127.0.0.1/"},
	{"http://1.2.3.4./", "http://1.2.3.4/"},
	{"http://0x/", "http://0.0.0.0/"},
	{"http://1.0x10000/", "http://1.1.0.0/"},
	{"http://[::1]:11434/v1", "http://[::1]:11434/v1"},
	{"http://[0:0:0:0:0:0:0:1]/", "http://[::1]/"},
	{"http://[2001:DB8:0:0:1:0:0:1]/", "http://[2001:db8::1:0:0:1]/"},
	{"http://[1:0:0:2::3:0]/", "http://[1::2:0:0:3:0]/"},
	{"http://[::ffff:192.168.0.1]/", "http://[::ffff:c0a8:1]/"},
	{"http://[::]/", "http://[::]/"},
	{"http://[1::]/", "http://[1::]/"},
	{"http://[1:2:3:4:5:6:7::]/", "http://[1:2:3:4:5:6:7:0]/"},
	{"http://[0001:02:3:4:5:6:7:8]/", "http://[1:2:3:4:5:6:7:8]/"},
	{"http://example.com./", "http://example.com./"},
	{"http://a..b/", "http://a..b/"},
	{"http://foo_bar.example/", "http://foo_bar.example/"},
	{"http://foo.bar09/", "http://foo.bar09/"},
}

var baseURLInvalid = []string{
	"ftp://example.com",
	"file:///etc/passwd",
	"javascript:alert(1)",
	"example.com",
	"//example.com",
	"localhost:8080",
	"1http://x",
	"http",
	"http://user@example.com",
	"http://user:pass@example.com",
	"http://:pass@example.com",
	"http://@@example.com",
	"http://a@b@example.com",
	"http://example.com/?q=1",
	"http://example.com/#f",
	"http://example.com?",
	"http://",
	"http:",
	"http:///",
	"http://@/",
	"http://:80/",
	"http://example.com:65536/",
	"http://example.com:8a/",
	"http://example.com:80:80/",
	"http://example.com:-1/",
	"http://exa mple.com/",
	"http://exa%20mple.com/",
	"http://exa%mple.com/",
	"http://exa<mple.com/",
	"http://a^b/",
	"http://a|b/",
	"http://[::1/",
	"http://[::1]x/",
	"http://[1:2:3:4:5:6:7:8:9]/",
	"http://[1:2:3:4:5:6:7]/",
	"http://[::1::2]/",
	"http://[1.2.3.4]/",
	"http://[::1.2.3.04]/",
	"http://[::256.0.0.1]/",
	"http://[::1.2.3]/",
	"http://[fe80::1%25eth0]/",
	"http://[12345::]/",
	"http://[:1]/",
	"http://[1:]/",
	"http://1.2.3.256/",
	"http://1.2.3.4.5/",
	"http://foo.09/",
	"http://0x100000000/",
	"http://1.2.0x10000/",
	"http://256.1.1.1/",
	"http://08.1.1.1/",
}

// baseURLUnsupported are hosts that need UTS #46 processing; they are
// rejected rather than canonicalized.
var baseURLUnsupported = []string{
	"http://exämple.com/",
	"http://ex%C3%A4mple.com/",
	"http://xn--nxasmq6b.com/",
	"http://a.XN--abc/",
}

func TestCanonical(t *testing.T) {
	for _, c := range baseURLValid {
		got, err := Canonical(c.in)
		if err != nil || got != c.want {
			t.Errorf("Canonical(%q) = %q, %v; want %q", c.in, got, err, c.want)
			continue
		}
		if again, err := Canonical(got); err != nil || again != got {
			t.Errorf("Canonical is not idempotent on %q: %q, %v", got, again, err)
		}
	}
	for _, in := range append(baseURLInvalid, baseURLUnsupported...) {
		got, err := Canonical(in)
		if err == nil {
			t.Errorf("Canonical(%q) = %q, want an error", in, got)
		} else if !errors.Is(err, ErrInvalid) {
			t.Errorf("Canonical(%q) error %v does not wrap ErrInvalid", in, err)
		}
	}
	for _, blank := range []string{"", "   ", "\t\n", "\u3000\ufeff"} {
		if got, err := Canonical(blank); got != "" || err != nil {
			t.Errorf("Canonical(%q) = %q, %v; want absent", blank, got, err)
		}
	}
}

func TestBaseURLPathPercentEncodeSet(t *testing.T) {
	// Every ASCII byte outside the set is kept as is; every byte inside it is
	// percent-encoded with uppercase hex.
	for c := 0x20; c < 0x7f; c++ {
		ch := string(rune(c))
		if strings.ContainsAny(ch, `/\?#.`) {
			continue
		}
		got, err := Canonical("http://h/a" + ch + "b")
		if err != nil {
			t.Errorf("byte %q: %v", ch, err)
			continue
		}
		encoded := strings.ContainsRune(` "<>^`+"`{}", rune(c))
		want := "http://h/a" + ch + "b"
		if encoded {
			want = fmt.Sprintf("http://h/a%%%02Xb", c)
		}
		if got != want {
			t.Errorf("byte %q: got %q want %q", ch, got, want)
		}
	}
}
