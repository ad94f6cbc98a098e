package prompt

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// GitTimeout bounds each git command the environment block runs.
const GitTimeout = 2 * time.Second

// gitState is what the environment says of a workspace's repository.
type gitState struct {
	Repo    bool
	Branch  string // "" when git could not tell
	Changed int    // changed files; -1 when not counted
}

// gitEnv is the environment git runs with: the little it needs of the
// host's (never its keys or tokens), no system configuration, no prompts,
// no optional locks (the user's own git commands never wait on ours).
func gitEnv() []string {
	env := []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "GIT_OPTIONAL_LOCKS=0", "LC_ALL=C"}
	for _, k := range []string{"PATH", "HOME", "USER", "LOGNAME", "XDG_CONFIG_HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// gitArgs come before every git command: the workspace's configuration
// may have been written by the model, so nothing it names is run (no
// fsmonitor hook, no pager, no submodule recursion).
var gitArgs = []string{"--no-optional-locks", "-c", "core.fsmonitor=false", "-c", "core.pager=cat", "-c", "status.submoduleSummary=false"}

// git runs one git command in dir, bounded by GitTimeout, and returns its
// standard output's lines (each passed to line until it returns false).
func git(ctx context.Context, dir string, line func(string) bool, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, GitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", append(append([]string{"-C", dir}, gitArgs...), args...)...)
	cmd.Env = gitEnv()
	cmd.WaitDelay = GitTimeout
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	wanted := true
	for sc.Scan() {
		// Read to the end (the timeout bounds it), so git exits by itself.
		if wanted {
			wanted = line(sc.Text())
		}
	}
	return cmd.Wait()
}

// gitStatus reports the repository state of dir: skipped (not a
// repository) when no directory from dir up holds .git, or git is absent.
// The branch is read from HEAD. The changed files are counted (git status)
// only when git itself, which reads every file of the configuration as it
// will for the status (includes, the common directory of a worktree),
// finds no filter defined outside the user's global and the system
// configuration: git status may run a filter, and a model may have
// written the repository's configuration.
//
// Four git processes a turn (rev-parse, symbolic-ref, config, status) put
// the host's turn overhead (BenchmarkTurnOverhead, internal/bench) at a
// p50 of 4.2–4.9 ms; a workspace outside a repository now runs none, and
// one inside runs two.
func gitStatus(ctx context.Context, dir string) gitState {
	if dir == "" {
		return gitState{}
	}
	gitDir, ok := findGitDir(dir)
	if !ok {
		return gitState{}
	}
	if _, err := exec.LookPath("git"); err != nil {
		return gitState{}
	}
	st := gitState{Repo: true, Changed: -1, Branch: headBranch(gitDir)}
	if mayRunFilters(ctx, dir) {
		return st
	}
	n := 0
	if err := git(ctx, dir, func(string) bool { n++; return true }, "status", "--porcelain=v1", "--ignore-submodules=all", "--untracked-files=normal"); err == nil {
		st.Changed = n
	}
	return st
}

// mayRunFilters reports whether the configuration git reads in dir defines
// a filter outside the user's global and the system configuration, or
// cannot be read: git status must then not run.
func mayRunFilters(ctx context.Context, dir string) bool {
	found := false
	err := git(ctx, dir, func(l string) bool {
		scope, _, _ := strings.Cut(l, "\t")
		if scope != "global" && scope != "system" {
			found = true
			return false
		}
		return true
	}, "config", "--show-scope", "--get-regexp", `^filter\.`)
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 {
		return found // no filter at all
	}
	return found || err != nil
}

// findGitDir finds the repository of dir: the nearest .git from dir up (a
// directory, or a file naming the git directory as "gitdir: PATH").
func findGitDir(dir string) (string, bool) {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		p := filepath.Join(d, ".git")
		if fi, err := os.Lstat(p); err == nil {
			if fi.IsDir() {
				return p, true
			}
			if fi.Mode().IsRegular() {
				b, err := readSmall(p)
				if rest, found := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir:"); err == nil && found {
					g := strings.TrimSpace(rest)
					if !filepath.IsAbs(g) {
						g = filepath.Join(d, g)
					}
					return g, true
				}
			}
			return "", true // a .git git cannot read: still a repository
		}
		if d == filepath.Dir(d) {
			return "", false
		}
	}
}

// headBranch reads the branch HEAD names ("(detached HEAD)" when it names
// a commit, "" when it cannot be read).
func headBranch(gitDir string) string {
	if gitDir == "" {
		return ""
	}
	b, err := readSmall(filepath.Join(gitDir, "HEAD"))
	if err != nil {
		return ""
	}
	head := strings.TrimSpace(string(b))
	if ref, ok := strings.CutPrefix(head, "ref: refs/heads/"); ok && ref != "" {
		return ref
	}
	if head != "" {
		return "(detached HEAD)"
	}
	return ""
}

// readSmall reads a regular file of at most 1 MiB without following a
// final symlink or blocking on a FIFO.
func readSmall(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, errors.Join(err, errors.New("prompt: not a regular file"))
	}
	return io.ReadAll(io.LimitReader(f, 1<<20))
}
