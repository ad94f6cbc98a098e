package tools

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	env := newEnv(t)
	var lines []string
	for i := 0; i < 2500; i++ {
		lines = append(lines, fmt.Sprintf("line %d", i))
	}
	writeFile(t, env, "big.txt", strings.Join(lines, "\n")+"\n")
	writeFile(t, env, "small.txt", "a\nb\nc")
	writeFile(t, env, "empty.txt", "")
	writeFile(t, env, "long.txt", strings.Repeat("é", 3000)+"\nshort\n"+strings.Repeat("x", 2000)+"\n")
	writeFile(t, env, "bin.dat", "abc\x00def")
	writeFile(t, env, "dir/x.txt", "x")
	// ~300 KiB in 1000-byte lines: the byte cap applies before the line cap.
	writeFile(t, env, "wide.txt", strings.Repeat(strings.Repeat("w", 999)+"\n", 300))
	read := byName(t, NameRead)

	t.Run("whole small file", func(t *testing.T) {
		r := run(t, read, env, map[string]any{"path": "small.txt"})
		mustOK(t, r)
		if got := text(t, r); got != "a\nb\nc" {
			t.Errorf("text %q", got)
		}
	})
	t.Run("offset and limit", func(t *testing.T) {
		got := text(t, run(t, read, env, map[string]any{"path": "small.txt", "offset": 1, "limit": 1}))
		if !strings.HasPrefix(got, "b\n[") || !strings.Contains(got, "offset=2") {
			t.Errorf("text %q", got)
		}
		if got := text(t, run(t, read, env, map[string]any{"path": "small.txt", "offset": 2})); got != "c" {
			t.Errorf("offset 2: %q", got)
		}
	})
	t.Run("offset past end", func(t *testing.T) {
		mustError(t, run(t, read, env, map[string]any{"path": "small.txt", "offset": 3}), "past the end of the file (3 lines)")
	})
	t.Run("default line cap", func(t *testing.T) {
		got := text(t, run(t, read, env, map[string]any{"path": "big.txt"}))
		_, note, _ := strings.Cut(got, "\n[")
		if n := strings.Count(got, "\nline "); n != ReadDefaultLines-1 {
			t.Errorf("got %d lines", n+1)
		}
		if !strings.Contains(got, "line 1999\n") || strings.Contains(got, "line 2000\n") {
			t.Errorf("wrong slice")
		}
		if !strings.Contains(note, "showing lines 1-2000") || !strings.Contains(note, "offset=2000") {
			t.Errorf("note %q", note)
		}
		rest := text(t, run(t, read, env, map[string]any{"path": "big.txt", "offset": 2000}))
		if !strings.HasPrefix(rest, "line 2000\n") || !strings.HasSuffix(rest, "line 2499\n") {
			t.Errorf("rest starts %.20q ends %q", rest, rest[len(rest)-20:])
		}
	})
	t.Run("long lines cut", func(t *testing.T) {
		got := text(t, run(t, read, env, map[string]any{"path": "long.txt"}))
		first, rest, _ := strings.Cut(got, "\n")
		if first != strings.Repeat("é", ReadMaxLineChars)+" [line truncated]" {
			t.Errorf("first line %d bytes: %.40q", len(first), first)
		}
		if !strings.HasPrefix(rest, "short\n"+strings.Repeat("x", 2000)+"\n") {
			t.Errorf("a line of exactly %d chars must not be cut: %.80q", ReadMaxLineChars, rest)
		}
		if !strings.Contains(rest, "1 long line(s) were cut") {
			t.Errorf("missing note: %q", rest[len(rest)-80:])
		}
	})
	t.Run("byte cap", func(t *testing.T) {
		got := text(t, run(t, read, env, map[string]any{"path": "wide.txt"}))
		if len(got) > ReadMaxBytes+200 {
			t.Errorf("%d bytes", len(got))
		}
		if !strings.Contains(got, "continue with offset=262") {
			t.Errorf("note: %q", got[len(got)-100:])
		}
	})
	t.Run("empty", func(t *testing.T) {
		r := run(t, read, env, map[string]any{"path": "empty.txt"})
		if text(t, r) != "" || r.ModelText != "(empty file)" || r.IsError {
			t.Errorf("%+v", r)
		}
	})
	t.Run("binary", func(t *testing.T) {
		mustError(t, run(t, read, env, map[string]any{"path": "bin.dat"}), "binary file")
	})
	t.Run("directory", func(t *testing.T) {
		mustError(t, run(t, read, env, map[string]any{"path": "dir"}), "is a directory")
	})
	t.Run("missing", func(t *testing.T) {
		mustError(t, run(t, read, env, map[string]any{"path": "nope.txt"}), "file not found: nope.txt")
	})
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		mustError(t, runCtx(t, ctx, read, env, map[string]any{"path": "small.txt"}), "aborted")
	})
}
