package prompt

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tree makes the directories and files of files (path → content) under a
// fresh real directory and returns it.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for p, content := range files {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func build(t *testing.T, b *Builder, in Input) (string, Notes) {
	t.Helper()
	b.git = func(context.Context, string) gitState { return gitState{} }
	return b.Build(context.Background(), in)
}

// order fails unless each of want appears in s, in order.
func order(t *testing.T, s string, want ...string) {
	t.Helper()
	at := 0
	for _, w := range want {
		i := strings.Index(s[at:], w)
		if i < 0 {
			t.Fatalf("%q missing (or out of order) after byte %d of:\n%s", w, at, s)
		}
		at += i + len(w)
	}
}

func TestInstructionsChainOrderAndFallback(t *testing.T) {
	root := tree(t, map[string]string{
		"user/maka/AGENTS.md":   "user rule",
		"repo/.git/":            "",
		"repo/AGENTS.md":        "repo rule",
		"repo/a/CLAUDE.md":      "a claude rule",
		"repo/a/b/AGENTS.md":    "b agents rule",
		"repo/a/b/CLAUDE.md":    "b claude rule: never read",
		"repo/a/b/ws/AGENTS.md": "workspace rule",
		"AGENTS.md":             "above the repository: never read",
	})
	ws := filepath.Join(root, "repo/a/b/ws")
	s, notes := build(t, New(), Input{Workspace: ws, UserDir: filepath.Join(root, "user/maka")})
	if len(notes) != 0 {
		t.Errorf("notes: %v", notes)
	}
	order(t, s, "You are Maka", "# Instructions",
		filepath.Join(root, "user/maka/AGENTS.md"), "user rule",
		filepath.Join(root, "repo/AGENTS.md"), "repo rule",
		filepath.Join(root, "repo/a/CLAUDE.md"), "a claude rule",
		filepath.Join(root, "repo/a/b/AGENTS.md"), "b agents rule",
		filepath.Join(root, "repo/a/b/ws/AGENTS.md"), "workspace rule",
		"# Environment", "Workspace: "+ws)
	for _, never := range []string{"never read"} {
		if strings.Contains(s, never) {
			t.Errorf("prompt holds %q:\n%s", never, s)
		}
	}
}

func TestInstructionsWithoutRepositoryReadTheWorkspaceOnly(t *testing.T) {
	root := tree(t, map[string]string{"AGENTS.md": "parent rule", "ws/CLAUDE.md": "ws claude"})
	s, _ := build(t, New(), Input{Workspace: filepath.Join(root, "ws")})
	if strings.Contains(s, "parent rule") || !strings.Contains(s, "ws claude") {
		t.Fatalf("prompt:\n%s", s)
	}
}

func TestGitFileMarksTheRepositoryRoot(t *testing.T) {
	root := tree(t, map[string]string{"AGENTS.md": "outer", "wt/.git": "gitdir: /elsewhere", "wt/AGENTS.md": "inner", "wt/sub/": ""})
	s, _ := build(t, New(), Input{Workspace: filepath.Join(root, "wt/sub")})
	if strings.Contains(s, "outer") || !strings.Contains(s, "inner") {
		t.Fatalf("prompt:\n%s", s)
	}
}

func TestChangedFileIsReadAgain(t *testing.T) {
	root := tree(t, map[string]string{"AGENTS.md": "first version"})
	b := New()
	s, _ := build(t, b, Input{Workspace: root})
	if !strings.Contains(s, "first version") {
		t.Fatalf("prompt:\n%s", s)
	}
	// Same size and a pinned mtime: only the inode tells (a rename over it).
	p := filepath.Join(root, "AGENTS.md")
	fi, _ := os.Stat(p)
	tmp := filepath.Join(root, "new")
	if err := os.WriteFile(tmp, []byte("other version"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	s, _ = build(t, b, Input{Workspace: root})
	if !strings.Contains(s, "other version") || strings.Contains(s, "first version") {
		t.Fatalf("after a change, prompt:\n%s", s)
	}
	// Rewritten in place with another size.
	if err := os.WriteFile(p, []byte("third, longer version"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, _ = build(t, b, Input{Workspace: root})
	if !strings.Contains(s, "third, longer version") {
		t.Fatalf("after a rewrite, prompt:\n%s", s)
	}
}

func TestUnchangedFileComesFromTheCache(t *testing.T) {
	root := tree(t, map[string]string{"AGENTS.md": "cached"})
	b := New()
	build(t, b, Input{Workspace: root})
	p := filepath.Join(root, "AGENTS.md")
	// The cache is keyed by the file's identity: poison its entry and see
	// it served while the file is unchanged.
	b.files.mu.Lock()
	e := b.files.files[p]
	e.text = "from the cache"
	b.files.files[p] = e
	b.files.mu.Unlock()
	s, _ := build(t, b, Input{Workspace: root})
	if !strings.Contains(s, "from the cache") {
		t.Fatalf("prompt:\n%s", s)
	}
}

func TestSymlinks(t *testing.T) {
	root := tree(t, map[string]string{
		"secret.txt":       "outside secret",
		"ws/.git/":         "",
		"ws/CLAUDE.md":     "shared rule",
		"ws/sub/":          "",
		"ws/docs/notes.md": "inside but not in the chain",
	})
	ws := filepath.Join(root, "ws")
	// AGENTS.md -> CLAUDE.md in the same directory is followed.
	if err := os.Symlink("CLAUDE.md", filepath.Join(ws, "AGENTS.md")); err != nil {
		t.Fatal(err)
	}
	// One pointing out of the chain is skipped with a note.
	if err := os.Symlink("../../secret.txt", filepath.Join(ws, "sub", "AGENTS.md")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../docs/notes.md", filepath.Join(ws, "sub", "CLAUDE.md")); err != nil {
		t.Fatal(err)
	}
	s, notes := build(t, New(), Input{Workspace: filepath.Join(ws, "sub")})
	if !strings.Contains(s, "shared rule") || strings.Count(s, "shared rule") != 1 {
		t.Errorf("the same-directory link is not read once:\n%s", s)
	}
	if strings.Contains(s, "outside secret") || strings.Contains(s, "not in the chain") {
		t.Errorf("a link out of the chain was followed:\n%s", s)
	}
	if len(notes) != 1 || notes[0].Path != filepath.Join(ws, "sub", "AGENTS.md") || !strings.Contains(notes[0].Reason, "outside") {
		t.Errorf("notes = %+v", notes)
	}
}

func TestNotUTF8AndNotRegularAreSkipped(t *testing.T) {
	root := tree(t, map[string]string{"ws/.git/": "", "ws/AGENTS.md": "ok \xff\xfe bad", "ws/a/AGENTS.md/": ""})
	ws := filepath.Join(root, "ws")
	fifo := filepath.Join(ws, "a", "b", "AGENTS.md")
	if err := os.MkdirAll(filepath.Dir(fifo), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var s string
	var notes Notes
	go func() {
		defer close(done)
		s, notes = build(t, New(), Input{Workspace: filepath.Dir(fifo)})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("reading a FIFO blocked")
	}
	if strings.Contains(s, "bad") {
		t.Errorf("invalid UTF-8 included:\n%s", s)
	}
	reasons := map[string]string{}
	for _, n := range notes {
		reasons[n.Path] = n.Reason
	}
	if reasons[filepath.Join(ws, "AGENTS.md")] != errNotUTF8.Error() ||
		reasons[filepath.Join(ws, "a", "AGENTS.md")] != errNotRegular.Error() ||
		reasons[fifo] != errNotRegular.Error() {
		t.Errorf("notes = %+v", notes)
	}
}

func TestProtectedPathsAreNeverRead(t *testing.T) {
	root := tree(t, map[string]string{"store/.git/": "", "store/AGENTS.md": "host's own", "store/ws/AGENTS.md": "inside the root"})
	s, notes := build(t, New(), Input{Workspace: filepath.Join(root, "store/ws"), Protected: []string{filepath.Join(root, "store")}})
	if strings.Contains(s, "host's own") || strings.Contains(s, "inside the root") {
		t.Fatalf("protected file read:\n%s", s)
	}
	if len(notes) != 2 {
		t.Fatalf("notes = %+v", notes)
	}
}

func TestInstructionsAreCutAt32KiB(t *testing.T) {
	big := strings.Repeat("line of rules é\n", 3000) // 51 000 bytes
	root := tree(t, map[string]string{"ws/.git/": "", "ws/AGENTS.md": "small first", "ws/a/AGENTS.md": big, "ws/a/b/AGENTS.md": "after the cut"})
	ws := filepath.Join(root, "ws/a/b")
	s, notes := build(t, New(), Input{Workspace: ws})
	start := strings.Index(s, "# Instructions")
	end := strings.Index(s, "# Environment")
	section := s[start:end]
	if len(section) > MaxInstructionBytes {
		t.Errorf("instructions section is %d bytes", len(section))
	}
	if len(section) < MaxInstructionBytes-2*cutReserve {
		t.Errorf("instructions section is only %d bytes", len(section))
	}
	order(t, section, "small first", "line of rules", "[Instructions cut here at the 32 KiB limit", filepath.Join(root, "ws/a/AGENTS.md"), "and 1 later files")
	if strings.Contains(s, "after the cut") {
		t.Error("a file after the cut was included")
	}
	if len(notes) != 1 || !strings.Contains(notes[0].Reason, "cut here") {
		t.Errorf("notes = %+v", notes)
	}
	if !strings.Contains(section, "é\n\n[Instructions cut") {
		t.Errorf("not cut at a line end: %q", section[len(section)-300:])
	}
}

func TestTrimPartialRune(t *testing.T) {
	for in, want := range map[string]string{"abc": "abc", "ab\xc3": "ab", "a\xe2\x82": "a", "a\xe2\x82\xac": "a\xe2\x82\xac", "": ""} {
		if got := string(trimPartialRune([]byte(in))); got != want {
			t.Errorf("trimPartialRune(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEnvironmentBlock(t *testing.T) {
	b := New()
	b.git = func(_ context.Context, dir string) gitState {
		return gitState{Repo: true, Branch: "feature/x", Changed: 3}
	}
	now := time.Date(2026, 3, 14, 23, 59, 0, 0, time.UTC)
	s, _ := b.Build(context.Background(), Input{Workspace: "/w", Now: now, Shell: "/bin/bash", Mode: "execute", Sandbox: "workspace-write", Tools: []string{"Read", "Bash", "task_create", "task_update"}})
	order(t, s, "- Read:", "- Bash:", "task tools (task_create, task_update)", "# Environment", "Workspace: /w", "Platform: ", "Shell of the Bash tool: /bin/bash",
		"Today's date: 2026-03-14 (Saturday)", "branch feature/x, 3 changed files", "Permission mode: execute", "Sandbox: in force for Bash (workspace-write)")
	if strings.Contains(s, "- Edit:") {
		t.Errorf("a tool the turn does not offer is described:\n%s", s)
	}
	s, _ = b.Build(context.Background(), Input{Workspace: "/w", Mode: "bypass", Sandbox: "off", Tools: []string{"Read"}})
	if !strings.Contains(s, "Sandbox: not in force") || strings.Contains(s, "Multi-step") {
		t.Errorf("prompt:\n%s", s)
	}
}

func TestGitStatus(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := tree(t, map[string]string{"a.txt": "a", "b.txt": "b"})
	if st := gitStatus(context.Background(), dir); st.Repo {
		t.Fatalf("not a repository: %+v", st)
	}
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	run("init", "-q", "-b", "trunk")
	st := gitStatus(context.Background(), dir)
	if !st.Repo || st.Branch != "trunk" || st.Changed != 2 {
		t.Fatalf("fresh repository: %+v", st)
	}
	// A clean filter configured in the repository is never run: the
	// files are not counted then.
	marker := filepath.Join(dir, "ran")
	run("config", "filter.x.clean", "touch "+marker+"; cat")
	if err := os.WriteFile(filepath.Join(dir, ".gitattributes"), []byte("* filter=x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st = gitStatus(context.Background(), dir)
	if !st.Repo || st.Branch != "trunk" || st.Changed != -1 {
		t.Fatalf("with a filter: %+v", st)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the repository's filter ran")
	}
}
