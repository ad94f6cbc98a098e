package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func globFiles(t *testing.T, r Result) ([]string, bool) {
	t.Helper()
	mustOK(t, r)
	var c struct {
		Kind  string
		Value struct {
			Files     []string
			Truncated bool
		}
	}
	if err := json.Unmarshal(r.Content, &c); err != nil || c.Kind != "json" || c.Value.Files == nil {
		t.Fatalf("content %s (%v)", r.Content, err)
	}
	return c.Value.Files, c.Value.Truncated
}

func TestGlob(t *testing.T) {
	env := newEnv(t)
	for _, f := range []string{
		"main.go", "README.md", "a/b.go", "a/b/c.go", "a/b/c/d.go", "a/b/c/d.txt", ".hidden/x.go",
		".git/config.go", "sub/.git/y.go", "z/y/x.md",
	} {
		writeFile(t, env, f, "x")
	}
	// A symlink loop and a link to a directory inside the workspace.
	if err := os.Symlink("..", filepath.Join(env.Workspace, "a", "loop")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("z", filepath.Join(env.Workspace, "zlink")); err != nil {
		t.Fatal(err)
	}
	glob := byName(t, NameGlob)
	tests := []struct {
		args map[string]any
		want []string
	}{
		{map[string]any{"pattern": "*.go"}, []string{"main.go"}},
		{map[string]any{"pattern": "**/*.md"}, []string{"README.md", "z/y/x.md", "zlink/y/x.md"}},
		{map[string]any{"pattern": "a/**/*.go"}, []string{"a/b.go", "a/b/c.go", "a/b/c/d.go"}},
		{map[string]any{"pattern": "a/*/?.go"}, []string{"a/b/c.go"}},
		{map[string]any{"pattern": "a/b/c/d.[gt]*"}, []string{"a/b/c/d.go", "a/b/c/d.txt"}},
		{map[string]any{"pattern": "*.go", "cwd": "a/b"}, []string{"a/b/c.go"}},
		{map[string]any{"pattern": "**/d.go", "cwd": "a"}, []string{"a/b/c/d.go"}},
		{map[string]any{"pattern": ".hidden/*"}, []string{".hidden/x.go"}},
		{map[string]any{"pattern": "nothing*"}, []string{}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.args), func(t *testing.T) {
			r := run(t, glob, env, tt.args)
			files, truncated := globFiles(t, r)
			if !reflect.DeepEqual(files, tt.want) || truncated {
				t.Errorf("files %q (truncated %v), want %q", files, truncated, tt.want)
			}
		})
	}
	// "**" finds every .go file once, skipping .git and the loop's
	// repetition of the tree.
	files, _ := globFiles(t, run(t, glob, env, map[string]any{"pattern": "**/*.go"}))
	for _, f := range files {
		if filepath.Base(filepath.Dir(f)) == ".git" {
			t.Errorf(".git not skipped: %s", f)
		}
	}
	if len(files) > 20 {
		t.Errorf("symlink loop was followed repeatedly: %d files", len(files))
	}
	mustError(t, run(t, glob, env, map[string]any{"pattern": "*", "cwd": "main.go"}), "not a directory")
	mustError(t, run(t, glob, env, map[string]any{"pattern": "*", "cwd": "missing"}), "not found")
	mustError(t, run(t, glob, env, map[string]any{"pattern": "[ab"}), "unterminated")
}

func TestGlobLimit(t *testing.T) {
	env := newEnv(t)
	for i := 0; i < GlobMaxResults+50; i++ {
		writeFile(t, env, fmt.Sprintf("d/f%03d.txt", i), "")
	}
	r := run(t, byName(t, NameGlob), env, map[string]any{"pattern": "**/*.txt"})
	files, truncated := globFiles(t, r)
	if len(files) != GlobMaxResults || !truncated || files[0] != "d/f000.txt" || files[GlobMaxResults-1] != "d/f199.txt" {
		t.Errorf("%d files, truncated %v, first %s", len(files), truncated, files[0])
	}
}

func TestGlobCancelled(t *testing.T) {
	env := newEnv(t)
	for i := 0; i < 600; i++ {
		writeFile(t, env, fmt.Sprintf("f%03d", i), "")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	mustError(t, runCtx(t, ctx, byName(t, NameGlob), env, map[string]any{"pattern": "**"}), "aborted")
}

// TestWalksSkipWhatDenyReadNames checks that Glob and Grep leave out,
// without a word, the files and directories Env.DenyRead names, and find
// the rest.
func TestWalksSkipWhatDenyReadNames(t *testing.T) {
	env := newEnv(t)
	for _, f := range []string{"keep.txt", "secret.env", "sub/keep.txt", "sub/secret.env", "private/keep.txt"} {
		writeFile(t, env, f, "needle\n")
	}
	var asked []string
	env.DenyRead = func(rel string) bool {
		asked = append(asked, rel)
		return strings.HasSuffix(rel, ".env") || rel == "private"
	}
	want := []string{"keep.txt", "sub/keep.txt"}
	files, _ := globFiles(t, run(t, byName(t, NameGlob), env, map[string]any{"pattern": "**"}))
	if !reflect.DeepEqual(files, want) {
		t.Errorf("Glob files %q, want %q", files, want)
	}
	matches, _ := grepMatches(t, run(t, byName(t, NameGrep), env, map[string]any{"pattern": "needle"}))
	if want := []string{"keep.txt:1:needle", "sub/keep.txt:1:needle"}; !reflect.DeepEqual(matches, want) {
		t.Errorf("Grep matches %q, want %q", matches, want)
	}
	matches, _ = grepMatches(t, run(t, byName(t, NameGrep), env, map[string]any{"pattern": "needle", "path": "sub/secret.env"}))
	if len(matches) != 0 {
		t.Errorf("Grep of a denied file matched %q", matches)
	}
	files, _ = globFiles(t, run(t, byName(t, NameGlob), env, map[string]any{"pattern": "*.txt", "cwd": "sub"}))
	if want := []string{"sub/keep.txt"}; !reflect.DeepEqual(files, want) {
		t.Errorf("Glob in sub %q, want %q", files, want)
	}
	if !slices.Contains(asked, "sub/secret.env") {
		t.Errorf("DenyRead was asked %q, not the workspace-relative sub/secret.env", asked)
	}
}
