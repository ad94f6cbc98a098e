package wireredact

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	cases := []struct{ in, want string }{
		{"plain text", "plain text"},
		{"use sk-abcdefghijklmnopqrstu now", "use " + Marker + " now"},
		{"key AIza" + strings.Repeat("x", 35), "key " + Marker},
		{"token ghp_abcdefghijklmnopqrstuvwxyz", "token " + Marker},
		{"xoxb-1234567890-abc", Marker},
		{"id AKIAABCDEFGHIJKLMNOP.", "id " + Marker + "."},
		{"Bearer   abcdefghijklmnopqrstuvwxyz0123", Marker},
		{"-----BEGIN RSA PRIVATE KEY-----\nabc", Marker + "\nabc"},
		{strings.Repeat("a", 40), Marker},
		{strings.Repeat("a", 39), strings.Repeat("a", 39)},
		{"ask-abcdefghijklmnopqrstu", "a" + Marker}, // inside a word too
	}
	for _, c := range cases {
		if got := Redact(c.in); got != c.want {
			t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.want)
		}
		if got, want := Contains(c.in), c.want != c.in; got != want {
			t.Errorf("Contains(%q) = %t, want %t", c.in, got, want)
		}
	}
}
