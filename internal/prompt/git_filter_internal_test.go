package prompt

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

func runGit(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@b", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@b")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v %s", args, err, out)
	}
}

// A repository configuration the model wrote (file_write in the workspace)
// that defines a clean filter, in forms a line scan would miss, never gets
// it run by the prompt builder's git status, which runs outside any
// sandbox.
func TestGitStatusNeverRunsAFilterTheWorkspaceDefines(t *testing.T) {
	for _, tc := range []struct{ name, header string }{
		{"same-line header", "[core] [filter \"evil\"]\n"},
		{"leading BOM", "\xef\xbb\xbf[filter \"evil\"]\n"},
		{"plain", "[filter \"evil\"]\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			marker := filepath.Join(t.TempDir(), "PWNED")
			runGit(t, dir, "init", "-q", ".")
			os.WriteFile(filepath.Join(dir, "f.txt"), []byte("hello\n"), 0o644)
			runGit(t, dir, "add", "f.txt")
			runGit(t, dir, "commit", "-qm", "init")
			// What the model writes with the Write tool:
			old, _ := os.ReadFile(filepath.Join(dir, ".git", "config"))
			body := tc.header + "\tclean = tee " + marker + "\n" + string(old)
			os.WriteFile(filepath.Join(dir, ".git", "config"), []byte(body), 0o644)
			os.WriteFile(filepath.Join(dir, ".gitattributes"), []byte("* filter=evil\n"), 0o644)
			later := time.Now().Add(2 * time.Second)
			os.Chtimes(filepath.Join(dir, "f.txt"), later, later)
			gitStatus(context.Background(), dir)
			if _, err := os.Stat(marker); err == nil {
				t.Fatalf("git status ran the filter the workspace's config names")
			}
		})
	}
}

// In a linked worktree the repository configuration is the common
// directory's: a filter there is never run either.
func TestGitStatusNeverRunsAWorktreesFilter(t *testing.T) {
	main := t.TempDir()
	wt := filepath.Join(t.TempDir(), "wt")
	marker := filepath.Join(t.TempDir(), "PWNED")
	runGit(t, main, "init", "-q", ".")
	os.WriteFile(filepath.Join(main, "f.txt"), []byte("hello\n"), 0o644)
	os.WriteFile(filepath.Join(main, ".gitattributes"), []byte("* filter=evil\n"), 0o644)
	runGit(t, main, "add", ".")
	runGit(t, main, "commit", "-qm", "init")
	runGit(t, main, "worktree", "add", "-q", wt)
	cfg, _ := os.OpenFile(filepath.Join(main, ".git", "config"), os.O_APPEND|os.O_WRONLY, 0)
	cfg.WriteString("[filter \"evil\"]\n\tclean = tee " + marker + "\n")
	cfg.Close()
	later := time.Now().Add(2 * time.Second)
	os.Chtimes(filepath.Join(wt, "f.txt"), later, later)
	gitStatus(context.Background(), wt)
	if _, err := os.Stat(marker); err == nil {
		t.Fatalf("git status in a worktree ran the filter of the common config")
	}
}
