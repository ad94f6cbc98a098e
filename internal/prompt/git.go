package prompt

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
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

// gitEnv is the environment git runs with: no system configuration, no
// prompts, no optional locks (the user's own git commands never wait on
// ours).
func gitEnv() []string {
	return append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "GIT_OPTIONAL_LOCKS=0", "LC_ALL=C")
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
// repository) when git is absent or fails. The changed files are counted
// only when no clean or process filter is configured in the repository
// itself: git status may run one, and a model may have written it.
func gitStatus(ctx context.Context, dir string) gitState {
	if dir == "" {
		return gitState{}
	}
	if _, err := exec.LookPath("git"); err != nil {
		return gitState{}
	}
	var top string
	if err := git(ctx, dir, func(l string) bool { top = l; return false }, "rev-parse", "--show-toplevel"); err != nil || top == "" {
		return gitState{}
	}
	st := gitState{Repo: true, Changed: -1}
	if git(ctx, dir, func(l string) bool { st.Branch = strings.TrimSpace(l); return false }, "symbolic-ref", "--short", "-q", "HEAD") != nil || st.Branch == "" {
		st.Branch = "(detached HEAD)"
	}
	filters := false
	_ = git(ctx, dir, func(l string) bool {
		scope, _, _ := strings.Cut(l, "\t")
		if scope != "global" && scope != "system" {
			filters = true
			return false
		}
		return true
	}, "config", "--show-scope", "--get-regexp", `^filter\..*\.(clean|process)$`)
	if filters {
		return st
	}
	n := 0
	if err := git(ctx, dir, func(string) bool { n++; return true }, "status", "--porcelain=v1", "--ignore-submodules=all", "--untracked-files=normal"); err == nil {
		st.Changed = n
	}
	return st
}
