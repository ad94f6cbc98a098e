package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func grepMatches(t *testing.T, r Result) ([]string, bool) {
	t.Helper()
	mustOK(t, r)
	var c struct {
		Kind  string
		Value struct {
			Matches   []string
			Truncated bool
		}
	}
	if err := json.Unmarshal(r.Content, &c); err != nil || c.Kind != "json" || c.Value.Matches == nil {
		t.Fatalf("content %s (%v)", r.Content, err)
	}
	return c.Value.Matches, c.Value.Truncated
}

// grepFixture is a workspace for the Grep tests.
func grepFixture(t *testing.T) Env {
	env := newEnv(t)
	writeFile(t, env, "a.go", "package a\nfunc Foo() {}\n// foo\n")
	writeFile(t, env, "b.txt", "Foo bar\r\nnothing\n")
	writeFile(t, env, "sub/c.go", "var x = Foo()\n")
	writeFile(t, env, "sub/deep/d.go", "Foo")
	writeFile(t, env, ".git/HEAD.go", "Foo\n")
	writeFile(t, env, "bin.dat", "Foo\x00\n")
	return env
}

func TestGrep(t *testing.T) {
	env := grepFixture(t)
	grep := grepTool{}
	tests := []struct {
		args map[string]any
		want []string
	}{
		{map[string]any{"pattern": "Foo"}, []string{"a.go:2:func Foo() {}", "b.txt:1:Foo bar", "sub/c.go:1:var x = Foo()", "sub/deep/d.go:1:Foo"}},
		{map[string]any{"pattern": "(?i)^// foo$"}, []string{"a.go:3:// foo"}},
		{map[string]any{"pattern": "Foo", "glob": "*.go"}, []string{"a.go:2:func Foo() {}", "sub/c.go:1:var x = Foo()", "sub/deep/d.go:1:Foo"}},
		{map[string]any{"pattern": "Foo", "glob": "!*.go"}, []string{"b.txt:1:Foo bar"}},
		{map[string]any{"pattern": "Foo", "glob": "sub/*.go"}, []string{"sub/c.go:1:var x = Foo()"}},
		{map[string]any{"pattern": "Foo", "path": "sub"}, []string{"sub/c.go:1:var x = Foo()", "sub/deep/d.go:1:Foo"}},
		{map[string]any{"pattern": "Foo", "path": "sub", "glob": "deep/*"}, []string{"sub/deep/d.go:1:Foo"}},
		{map[string]any{"pattern": "Foo", "path": "b.txt"}, []string{"b.txt:1:Foo bar"}},
		{map[string]any{"pattern": "absent"}, []string{}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.args), func(t *testing.T) {
			r := run(t, grep, env, tt.args)
			got, truncated := grepMatches(t, r)
			if !reflect.DeepEqual(got, tt.want) || truncated {
				t.Errorf("matches %q (truncated %v), want %q", got, truncated, tt.want)
			}
			if len(tt.want) == 0 && r.ModelText != "No matches found" {
				t.Errorf("model text %q", r.ModelText)
			}
		})
	}
	mustError(t, run(t, grep, env, map[string]any{"pattern": "("}), "invalid regular expression")
	mustError(t, run(t, grep, env, map[string]any{"pattern": "x", "glob": "[a"}), "glob")
	mustError(t, run(t, grep, env, map[string]any{"pattern": "x", "path": "nope"}), "not found")
}

func TestGrepLimits(t *testing.T) {
	env := newEnv(t)
	many := strings.Repeat("hit\n", GrepMaxPerFile+10)
	for i := 0; i < 6; i++ {
		writeFile(t, env, fmt.Sprintf("f%d.txt", i), many)
	}
	writeFile(t, env, "long.txt", "hit"+strings.Repeat("é", 3000)+"\n")
	got, truncated := grepMatches(t, run(t, grepTool{}, env, map[string]any{"pattern": "hit"}))
	if len(got) != GrepMaxLines || !truncated {
		t.Fatalf("%d matches, truncated %v", len(got), truncated)
	}
	perFile := map[string]int{}
	for _, m := range got {
		perFile[strings.SplitN(m, ":", 2)[0]]++
	}
	for f, n := range perFile {
		if n > GrepMaxPerFile {
			t.Errorf("%s: %d matches", f, n)
		}
	}
	got, _ = grepMatches(t, run(t, grepTool{}, env, map[string]any{"pattern": "hit", "path": "long.txt"}))
	if len(got) != 1 || !strings.HasSuffix(got[0], " [line truncated]") {
		t.Errorf("long line: %.80q", got)
	}
}

func TestGrepCancelled(t *testing.T) {
	env := newEnv(t)
	for i := 0; i < 600; i++ {
		writeFile(t, env, fmt.Sprintf("f%03d", i), "x\n")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	mustError(t, runCtx(t, ctx, grepTool{}, env, map[string]any{"pattern": "y"}), "aborted")
}
