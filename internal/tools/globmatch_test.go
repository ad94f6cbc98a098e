package tools

import (
	"path"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"*.go", "main.go", true},
		{"*.go", "dir/main.go", false},
		{"*.go", ".hidden.go", true},
		{"**/*.go", "main.go", true},
		{"**/*.go", "a/b/c/main.go", true},
		{"**/*.go", "a/b/c/main.ts", false},
		{"a/**/b", "a/b", true},
		{"a/**/b", "a/x/y/b", true},
		{"a/**/b", "a/x/y/c", false},
		{"a/**", "a/x/y", true},
		{"a/**/**/c", "a/c", true},
		{"src/?.ts", "src/a.ts", true},
		{"src/?.ts", "src/ab.ts", false},
		{"?", "é", true},
		{"[abc].txt", "b.txt", true},
		{"[!abc].txt", "b.txt", false},
		{"[^abc].txt", "d.txt", true},
		{"[a-c]x", "cx", true},
		{"[a-c]x", "dx", false},
		{"[]]", "]", true},
		{"[a-]", "-", true},
		{`\*`, "*", true},
		{`\*`, "a", false},
		{`[\]]`, "]", true},
		{"*a*b*c*", "xxaxxbxxcxx", true},
		{"*a*b*c*", "xxaxxcxxbxx", false},
		{"./a/./b.txt", "a/b.txt", true},
		{"a//b", "a/b", true},
		{"ä*", "äx", true},
		// A star stops between characters: '?' is always a whole one.
		{"*?", "€", true},
		{"*??", "€", false},
		{"*??", "日本", true},
		{"*???", "日本", false},
		{"*\xa9", "é", true}, // a stray byte of an invalid pattern matches byte-wise
	}
	for _, tt := range tests {
		g, err := compileGlob(tt.pattern)
		if err != nil {
			t.Errorf("compileGlob(%q): %v", tt.pattern, err)
			continue
		}
		if got := g.Match(tt.name); got != tt.want {
			t.Errorf("%q.Match(%q) = %v, want %v", tt.pattern, tt.name, got, tt.want)
		}
	}
}

func TestGlobCompileErrors(t *testing.T) {
	for _, p := range []string{"", "/abs/*", "../x", "a/../b", "[abc", `a\`, "[", ".", "./"} {
		if _, err := compileGlob(p); err == nil {
			t.Errorf("compileGlob(%q) accepted", p)
		}
	}
}

func TestGlobMayMatchBelow(t *testing.T) {
	g, _ := compileGlob("src/*/x.go")
	for dir, want := range map[string]bool{"src": true, "src/a": true, "src/a/b": false, "lib": false} {
		if got := g.mayMatchBelow(splitRel(dir)); got != want {
			t.Errorf("mayMatchBelow(%q) = %v", dir, got)
		}
	}
	g, _ = compileGlob("a/**/x.go")
	if !g.mayMatchBelow(splitRel("a/b/c/d")) || g.mayMatchBelow(splitRel("b")) {
		t.Error("** pruning")
	}
}

// escapeGlob quotes every character that is special in a glob segment.
func escapeGlob(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[]\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cleanRelPath reports whether p is a relative path whose segments are
// all non-empty and neither "." nor "..".
func cleanRelPath(p string) bool {
	if p == "" {
		return false
	}
	for _, s := range strings.Split(p, "/") {
		if s == "" || s == "." || s == ".." {
			return false
		}
	}
	return true
}

func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// FuzzGlobMatch checks that the matcher never panics, agrees with
// path.Match on patterns without "**" and classes, matches escaped
// literals exactly, and that a "**/" prefix only widens a match.
func FuzzGlobMatch(f *testing.F) {
	for _, s := range [][2]string{
		{"*.go", "main.go"}, {"**/*.go", "a/b/c.go"}, {"a/**/b", "a/b"}, {"[a-c]?", "bz"},
		{"[!x]*", "yz"}, {`\*x`, "*x"}, {"a*b*c", "aXbYc"}, {"[]-]", "-"}, {"?é", "xé"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		g, err := compileGlob(pattern)
		if err != nil {
			return
		}
		got := g.Match(name)
		_ = g.mayMatchBelow(splitRel(name))
		if got && !g.mayMatchBelow(splitRel(path.Dir(name))) && path.Dir(name) != "." && cleanRelPath(name) {
			t.Fatalf("%q matches %q but its directory was pruned", pattern, name)
		}
		// path.Match lets a star stop inside a character, so that '?'
		// matches part of it; here a star of a valid UTF-8 pattern stops
		// only between characters.
		midRune := utf8.ValidString(pattern) && strings.Contains(pattern, "?") && !isASCII(name)
		if cleanRelPath(pattern) && cleanRelPath(name) && !strings.ContainsAny(pattern, `[\`) &&
			!strings.Contains(pattern, "**") && !midRune {
			want, err := path.Match(pattern, name)
			if err == nil && want != got {
				t.Fatalf("Match(%q, %q) = %v, path.Match = %v", pattern, name, got, want)
			}
		}
		if cleanRelPath(name) {
			var segs []string
			for _, s := range strings.Split(name, "/") {
				segs = append(segs, escapeGlob(s))
			}
			lit, err := compileGlob(strings.Join(segs, "/"))
			if err != nil || !lit.Match(name) {
				t.Fatalf("escaped literal of %q does not match it (%v)", name, err)
			}
		}
		if got && cleanRelPath(name) {
			wide, err := compileGlob("**/" + pattern)
			if err != nil || !wide.Match(name) || !wide.Match("x/"+name) {
				t.Fatalf("**/%q does not match %q (%v)", pattern, name, err)
			}
		}
	})
}
