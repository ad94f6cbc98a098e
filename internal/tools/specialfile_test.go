package tools

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// specialTimeout bounds a tool call at a named pipe; a call still running
// then is a hang, which the test reports after opening the pipe's other
// end to release it.
const specialTimeout = 10 * time.Second

// mkfifo makes a named pipe in the workspace.
func mkfifo(t *testing.T, env Env, rel string) string {
	t.Helper()
	p := filepath.Join(env.Workspace, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// runAtPipe runs one call that names the named pipe fifo and returns its
// result. A call that has not returned within specialTimeout fails the
// test; the pipe is then opened for writing and closed, so that a call
// blocked on it returns and its goroutine ends.
func runAtPipe(t *testing.T, tool Tool, env Env, fifo string, args any) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), specialTimeout)
	defer cancel()
	type outcome struct {
		r   Result
		err error
	}
	done := make(chan outcome, 1)
	raw := mustJSON(t, args)
	go func() {
		r, err := tool.Run(context.Background(), env, raw)
		done <- outcome{r, err}
	}()
	select {
	case o := <-done:
		if o.err != nil {
			t.Fatalf("%s.Run: unexpected Go error %v", tool.Name(), o.err)
		}
		return o.r
	case <-ctx.Done():
	}
	t.Errorf("%s %s did not return: it is blocked on the named pipe", tool.Name(), raw)
	if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		_ = w.Close()
	}
	after, cancelAfter := context.WithTimeout(t.Context(), specialTimeout)
	defer cancelAfter()
	select {
	case o := <-done:
		return o.r
	case <-after.Done():
		t.Fatalf("%s %s is still blocked after the named pipe was opened for writing", tool.Name(), raw)
		return Result{}
	}
}

func mustJSON(t *testing.T, args any) []byte {
	t.Helper()
	if s, ok := args.(string); ok {
		return []byte(s)
	}
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestNamedPipesAndSocketsAreRefused checks that no file tool opens a
// named pipe (which would block the turn until something writes to it)
// or a socket, and that searches of a directory holding one skip it.
func TestNamedPipesAndSocketsAreRefused(t *testing.T) {
	env := newEnv(t)
	fifo := mkfifo(t, env, "pipe")
	mkfifo(t, env, "sub/pipe.txt")
	writeFile(t, env, "sub/a.txt", "needle here\n")
	if err := os.Symlink("pipe", filepath.Join(env.Workspace, "pipelink")); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(env.Workspace, "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	tests := []struct {
		name string
		tool Tool
		args map[string]any
		want string
	}{
		{"read", byName(t, NameRead), map[string]any{"path": "pipe"}, "named pipe"},
		{"read through a symlink", byName(t, NameRead), map[string]any{"path": "pipelink"}, "named pipe"},
		{"read a socket", byName(t, NameRead), map[string]any{"path": "s.sock"}, "socket"},
		{"grep the pipe", grepTool{}, map[string]any{"pattern": "x", "path": "pipe"}, "named pipe"},
		{"edit", byName(t, NameEdit), map[string]any{"path": "pipe", "old_string": "a", "new_string": "b"}, "named pipe"},
		{"write", byName(t, NameWrite), map[string]any{"path": "pipe", "content": "x"}, "named pipe"},
		{"write over a socket", byName(t, NameWrite), map[string]any{"path": "s.sock", "content": "x"}, "socket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustError(t, runAtPipe(t, tt.tool, env, fifo, tt.args), tt.want)
		})
	}
	t.Run("grep a directory holding pipes", func(t *testing.T) {
		r := runAtPipe(t, grepTool{}, env, filepath.Join(env.Workspace, "sub", "pipe.txt"), map[string]any{"pattern": "needle"})
		if got, _ := grepMatches(t, r); !slices.Equal(got, []string{"sub/a.txt:1:needle here"}) {
			t.Errorf("matches = %q", got)
		}
	})
	for _, p := range []string{fifo, sock} {
		if fi, err := os.Lstat(p); err != nil || fi.Mode().IsRegular() {
			t.Errorf("%s was replaced by a regular file (%v)", p, err)
		}
	}
}

// TestOpenAtRefusesASymlinkedEntry checks the open of a directory entry
// (the walks, and Edit once it resolved the file): a symlink there,
// swapped in after the entry was listed or resolved, is refused rather
// than followed, even one that points inside; a lookup from the
// workspace follows it.
func TestOpenAtRefusesASymlinkedEntry(t *testing.T) {
	env := newEnv(t)
	writeFile(t, env, "target.txt", "x\n")
	if err := os.Symlink("target.txt", filepath.Join(env.Workspace, "link")); err != nil {
		t.Fatal(err)
	}
	root, err := openRoot(env)
	if err != nil {
		t.Fatal(err)
	}
	defer root.close()
	if f, _, err := root.openAt(root.fd, "link", "link", unix.RESOLVE_NO_SYMLINKS, false); err == nil {
		f.Close()
		t.Fatal("openAt followed a symlink")
	}
	for _, rel := range []string{"target.txt", "link"} {
		f, st, err := root.open(rel)
		if err != nil || !fileMode(&st).IsRegular() {
			t.Fatalf("open(%s) = %v, %v", rel, fileMode(&st), err)
		}
		f.Close()
	}
}

// stopAfter is a context that reports itself cancelled from its n+1th
// Err call on: a tool that checks it before it starts and again while it
// reads sees the stop arrive in the middle of its read.
type stopAfter struct {
	context.Context
	n atomic.Int32
}

func (c *stopAfter) Err() error {
	if c.n.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

// TestReadsAreBounded checks that Read and Grep go through at most
// FileScanMaxBytes of a file, and stop reading once the turn is stopped.
func TestReadsAreBounded(t *testing.T) {
	env := newEnv(t)
	const line = "abc\n"
	lines := FileScanMaxBytes/len(line) + 100_000
	writeFile(t, env, "big.txt", strings.Repeat(line, lines-1)+"needle\n")

	r := run(t, byName(t, NameRead), env, map[string]any{"path": "big.txt", "offset": lines - 1})
	mustError(t, r, "past the first 16 MiB of the file")
	r = run(t, byName(t, NameRead), env, map[string]any{"path": "big.txt", "offset": FileScanMaxBytes/len(line) - 1})
	if got := text(t, r); got != "abc\n[Read goes through the first 16 MiB of a file only]" {
		t.Errorf("last line in reach = %q", got)
	}
	r = run(t, grepTool{}, env, map[string]any{"pattern": "needle", "path": "big.txt"})
	if got, _ := grepMatches(t, r); len(got) != 0 {
		t.Errorf("Grep searched past the first 16 MiB: %q", got)
	}

	writeFile(t, env, "small.txt", "one\ntwo\n")
	for _, tc := range []struct {
		tool Tool
		args map[string]any
	}{
		{byName(t, NameRead), map[string]any{"path": "small.txt"}},
		{grepTool{}, map[string]any{"pattern": "one", "path": "small.txt"}},
		{byName(t, NameEdit), map[string]any{"path": "small.txt", "old_string": "one", "new_string": "1"}},
	} {
		ctx := &stopAfter{Context: context.Background()}
		ctx.n.Store(1) // the check before the call starts passes
		mustError(t, runCtx(t, ctx, tc.tool, env, tc.args), "aborted")
	}
	if b, _ := os.ReadFile(filepath.Join(env.Workspace, "small.txt")); string(b) != "one\ntwo\n" {
		t.Errorf("the stopped Edit changed the file: %q", b)
	}
}
