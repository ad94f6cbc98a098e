package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestWrite(t *testing.T) {
	env := newEnv(t)
	write := byName(t, NameWrite)
	r := run(t, write, env, map[string]any{"path": "a/b/c.txt", "content": "héllo"})
	mustOK(t, r)
	c := content(t, r)
	if c["kind"] != "file_write" || c["path"] != "a/b/c.txt" || c["bytes"] != float64(len("héllo")) {
		t.Errorf("content %s", r.Content)
	}
	if r.ModelText != "Wrote 6 bytes to a/b/c.txt" {
		t.Errorf("model text %q", r.ModelText)
	}
	got, err := os.ReadFile(filepath.Join(env.Workspace, "a", "b", "c.txt"))
	if err != nil || string(got) != "héllo" {
		t.Fatalf("file %q %v", got, err)
	}

	// Overwrite keeps the mode and leaves no temporary files.
	p := writeFile(t, env, "x.sh", "old")
	if err := os.Chmod(p, 0o750); err != nil {
		t.Fatal(err)
	}
	mustOK(t, run(t, write, env, map[string]any{"path": "x.sh", "content": ""}))
	fi, err := os.Stat(p)
	if err != nil || fi.Size() != 0 || fi.Mode().Perm() != 0o750 {
		t.Errorf("after overwrite: %v %v", fi, err)
	}
	entries, _ := os.ReadDir(env.Workspace)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}

	// A symlink inside the workspace is written through.
	target := writeFile(t, env, "real.txt", "r")
	if err := os.Symlink("real.txt", filepath.Join(env.Workspace, "alias.txt")); err != nil {
		t.Fatal(err)
	}
	mustOK(t, run(t, write, env, map[string]any{"path": "alias.txt", "content": "through"}))
	if b, _ := os.ReadFile(target); string(b) != "through" {
		t.Errorf("target = %q", b)
	}
	if fi, _ := os.Lstat(filepath.Join(env.Workspace, "alias.txt")); fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("symlink was replaced")
	}

	mustError(t, run(t, write, env, map[string]any{"path": "a/b", "content": "x"}), "is a directory")
	mustError(t, run(t, write, env, map[string]any{"path": "a/b/c.txt/d", "content": "x"}), "not a directory")
	mustError(t, run(t, write, env, map[string]any{"path": "", "content": "x"}), "must not be empty")
}

func TestWriteConcurrentSamePath(t *testing.T) {
	env := newEnv(t)
	write := byName(t, NameWrite)
	const n = 16
	var wg sync.WaitGroup
	results := make([]Result, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := write.Run(t.Context(), env, []byte(fmt.Sprintf(`{"path":"same.txt","content":%q}`, strings.Repeat(fmt.Sprint(i%10), 10000))))
			if err != nil {
				t.Error(err)
			}
			results[i] = res
		}()
	}
	wg.Wait()
	for _, r := range results {
		if r.IsError {
			t.Fatalf("error: %s", r.Content)
		}
	}
	b, err := os.ReadFile(filepath.Join(env.Workspace, "same.txt"))
	if err != nil || len(b) != 10000 || strings.Count(string(b), string(b[:1])) != 10000 {
		t.Errorf("torn write: %d bytes %v", len(b), err)
	}
	if n := pathLockCount(); n != 0 {
		t.Errorf("%d lock entries left", n)
	}
}

func TestPathLockExcludes(t *testing.T) {
	unlock := lockPath("/x")
	acquired := make(chan struct{})
	go func() {
		u := lockPath("/x")
		close(acquired)
		u()
	}()
	other := lockPath("/y") // a different path is not blocked
	other()
	select {
	case <-acquired:
		t.Fatal("second lock acquired while the first is held")
	default:
	}
	if n := pathLockCount(); n != 1 {
		t.Errorf("%d entries, want 1 shared entry", n)
	}
	unlock()
	<-acquired
	if n := pathLockCount(); n != 0 {
		t.Errorf("%d entries left", n)
	}
}

// pathLockCount reports how many files currently have a lock entry.
func pathLockCount() int {
	pathLocks.Lock()
	defer pathLocks.Unlock()
	return len(pathLocks.m)
}
