package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEdit(t *testing.T) {
	tests := []struct {
		name      string
		file      string
		old, new  string
		want      string // file afterwards
		via       string
		startLine float64
		endLine   float64
	}{
		{"exact", "a\nfoo bar\nc\n", "foo bar", "baz", "a\nbaz\nc\n", MatchExact, 2, 2},
		{"exact multi-line", "a\nb\nc\nd\n", "b\nc\n", "B\n", "a\nB\nd\n", MatchExact, 2, 3},
		{"line-trimmed indentation", "func f() {\n\t\treturn 1\n\t}\n", "  return 1\n}", "return 2\n}",
			"func f() {\nreturn 2\n}\n", MatchLineTrimmed, 2, 3},
		{"line-trimmed crlf", "x\r\n  y = 1\r\nz\r\n", "y = 1 ", "y = 2", "x\r\ny = 2\r\nz\r\n", MatchLineTrimmed, 2, 2},
		{"line-trimmed with trailing newline", "a\n   b\nc\n", "  b \n", "B\n", "a\nB\nc\n", MatchLineTrimmed, 2, 2},
		{"whitespace collapsed", "if  (a &&\n    b) {\n", "if (a && b)", "if (a)", "if (a) {\n", MatchWhitespace, 1, 2},
		{"escape", "say \"hi\"\nnext\n", `say \"hi\"\nnext`, `say \"bye\"`, "say \"bye\"\n", MatchEscape, 1, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newEnv(t)
			p := writeFile(t, env, "f.txt", tt.file)
			r := run(t, byName(t, NameEdit), env, map[string]any{"path": "f.txt", "old_string": tt.old, "new_string": tt.new})
			mustOK(t, r)
			got, _ := os.ReadFile(p)
			if string(got) != tt.want {
				t.Errorf("file = %q, want %q", got, tt.want)
			}
			c := content(t, r)
			if c["kind"] != "file_diff" || c["matchedVia"] != tt.via || c["replacements"] != float64(1) ||
				c["startLine"] != tt.startLine || c["endLine"] != tt.endLine {
				t.Errorf("content %s", r.Content)
			}
			if paths, _ := c["paths"].([]any); len(paths) != 1 || paths[0] != "f.txt" {
				t.Errorf("paths %v", c["paths"])
			}
			diff, _ := c["diff"].(string)
			if !strings.HasPrefix(diff, "--- a/f.txt\n+++ b/f.txt\n@@ -") {
				t.Errorf("diff %q", diff)
			}
			if !strings.Contains(r.ModelText, "matched via "+tt.via) {
				t.Errorf("model text %q", r.ModelText)
			}
		})
	}
}

func TestEditDiff(t *testing.T) {
	env := newEnv(t)
	writeFile(t, env, "f.txt", "one\ntwo\nthree\nfour\n")
	r := run(t, byName(t, NameEdit), env, map[string]any{"path": "f.txt", "old_string": "two\nthree", "new_string": "2\n2.5\nthree"})
	mustOK(t, r)
	want := "--- a/f.txt\n+++ b/f.txt\n@@ -2,1 +2,2 @@\n-two\n+2\n+2.5\n"
	if got := content(t, r)["diff"]; got != want {
		t.Errorf("diff\n%s\nwant\n%s", got, want)
	}
	r = run(t, byName(t, NameEdit), env, map[string]any{"path": "f.txt", "old_string": "2.5\n", "new_string": ""})
	mustOK(t, r)
	if got := content(t, r)["diff"]; got != "--- a/f.txt\n+++ b/f.txt\n@@ -3,1 +2,0 @@\n-2.5\n" {
		t.Errorf("deletion diff %q", got)
	}
}

func TestEditErrors(t *testing.T) {
	env := newEnv(t)
	orig := "x = 1\ny = 2\nx = 1\n  z  \n\tz\n"
	p := writeFile(t, env, "f.txt", orig)
	writeFile(t, env, "bin", "a\x00b")
	tests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"identical", map[string]any{"path": "f.txt", "old_string": "a", "new_string": "a"}, "identical"},
		{"empty old", map[string]any{"path": "f.txt", "old_string": "", "new_string": "a"}, "old_string must not be empty"},
		{"missing file", map[string]any{"path": "nope.txt", "old_string": "a", "new_string": "b"}, "file not found"},
		{"not found", map[string]any{"path": "f.txt", "old_string": "w = 9", "new_string": "b"}, "not found"},
		{"exact ambiguous", map[string]any{"path": "f.txt", "old_string": "x = 1", "new_string": "b"}, "matches 2 times (exact match)"},
		{"line-trimmed ambiguous", map[string]any{"path": "f.txt", "old_string": "z \t", "new_string": "b"}, "matches 2 times (line-trimmed match)"},
		{"whitespace ambiguous", map[string]any{"path": "f.txt", "old_string": "x  =  1", "new_string": "b"}, "matches 2 times (whitespace match)"},
		{"blank old only whitespace", map[string]any{"path": "f.txt", "old_string": "\n\n\n\n", "new_string": "b"}, "not found"},
		{"directory", map[string]any{"path": ".", "old_string": "a", "new_string": "b"}, "is a directory"},
		{"binary", map[string]any{"path": "bin", "old_string": "a", "new_string": "b"}, "binary file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustError(t, run(t, byName(t, NameEdit), env, tt.args), tt.want)
		})
	}
	if got, _ := os.ReadFile(p); string(got) != orig {
		t.Errorf("file changed by failed edits: %q", got)
	}
	if n := pathLockCount(); n != 0 {
		t.Errorf("%d lock entries left", n)
	}
}

func TestEditThroughSymlinkKeepsLink(t *testing.T) {
	env := newEnv(t)
	target := writeFile(t, env, "real.txt", "hello\n")
	link := filepath.Join(env.Workspace, "link.txt")
	if err := os.Symlink("real.txt", link); err != nil {
		t.Fatal(err)
	}
	r := run(t, byName(t, NameEdit), env, map[string]any{"path": "link.txt", "old_string": "hello", "new_string": "bye"})
	mustOK(t, r)
	if b, _ := os.ReadFile(target); string(b) != "bye\n" {
		t.Errorf("target %q", b)
	}
	if fi, _ := os.Lstat(link); fi.Mode()&os.ModeSymlink == 0 {
		t.Error("link replaced by a file")
	}
}

func TestFindEditStrategies(t *testing.T) {
	// The exact strategy wins even when a fallback would match elsewhere.
	m := findEdit("a b\na  b\n", "a b", "c")
	if m.via != MatchExact || len(m.spans) != 1 || m.spans[0] != (span{0, 3}) {
		t.Errorf("exact: %+v", m)
	}
	// Invalid UTF-8 does not break the whitespace mapping.
	m = findEdit("\xff  x\t\ty\xfe", "x y", "z")
	if m.via != MatchWhitespace || len(m.spans) != 1 || m.spans[0] != (span{3, 7}) {
		t.Errorf("whitespace: %+v", m)
	}
	if unescapeEdit(`a\nb\tc\"d\\e\q`) != "a\nb\tc\"d\\e\\q" {
		t.Errorf("unescape %q", unescapeEdit(`a\nb\tc\"d\\e\q`))
	}
}
