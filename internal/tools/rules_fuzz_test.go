package tools

import (
	"strings"
	"testing"
)

// FuzzParseRule: parsing never panics, a parsed rule prints in a form that
// parses back to the same rule, and the canonical form of a command is
// stable and keeps every line of it.
func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"Read", "Bash(go test ./...)", "Bash(npm run test:*)", "Read(src/**)", "Edit(./docs/*.md)",
		"category:file_write", "Bash(echo 'a  b'   c)", "Read(/etc/**)", "Bash(a\nb)", "Bash(\\ x)", "mcp__a__b",
		"WebFetch(domain:bücher.de)", "WebFetch(domain:[::1])", "WebFetch(domain:LOCALHOST.)"} {
		f.Add("allow", s)
	}
	f.Fuzz(func(t *testing.T, effect, s string) {
		r, err := ParseRule(effect, s)
		if err == nil {
			again, err := ParseRule(r.Effect, r.String())
			if err != nil || again != r {
				t.Fatalf("%q parsed to %+v, printed %q, parsed again to %+v (%v)", s, r, r.String(), again, err)
			}
		}
		c := CanonicalCommand(s)
		if CanonicalCommand(c) != c {
			t.Fatalf("canonical form of %q is not stable: %q", s, c)
		}
		if strings.Count(c, "\n") != strings.Count(strings.TrimSpace(s), "\n") {
			t.Fatalf("canonical form of %q lost a line: %q", s, c)
		}
	})
}
