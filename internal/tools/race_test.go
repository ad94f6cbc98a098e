package tools

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Race bounds: a tool is called at most raceCalls() times while the
// exchanger swaps at most raceSwaps times; both stop early when the test
// ends or an escape is seen.
const raceSwaps = 50_000_000

// raceCalls is 3000 calls a case, 300 with -short (.ci/run also runs the
// race tests in full).
func raceCalls() int {
	if testing.Short() {
		return 300
	}
	return 3000
}

// outsideSecret marks the file outside the workspace the race tests try
// to reach.
const outsideSecret = "OUTSIDE-SECRET"

// exchangeParent makes ws/d a directory holding file and ws/d.link a
// symlink to target, then exchanges the two names with renameat2(RENAME_EXCHANGE)
// in a loop, as a command of the same step could: d is a directory one
// moment and a symlink out of the workspace the next. The loop runs until
// ctx ends or raceSwaps exchanges were made; the returned function stops
// it and waits for it.
func exchangeParent(t *testing.T, ctx context.Context, ws, target, file string) (stop func()) {
	t.Helper()
	d := filepath.Join(ws, "d")
	link := filepath.Join(ws, "d.link")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, file), []byte("inside\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; n < raceSwaps && ctx.Err() == nil; n++ {
			if err := unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("renameat2: %v", err)
				return
			}
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}

// TestParentSwappedForASymlinkIsNotFollowed calls each file tool on d/f
// (or d) while d is exchanged with a symlink to a directory outside the
// workspace: no call may read, list, search or change what is outside.
func TestParentSwappedForASymlinkIsNotFollowed(t *testing.T) {
	tests := []struct {
		name string
		tool string
		args map[string]any
		// escaped reports whether a call's result or the outside
		// directory shows that the call went outside.
		escaped func(r Result, out string) bool
	}{
		{"write", NameWrite, map[string]any{"path": "d/f", "content": "PWNED\n"}, func(_ Result, out string) bool {
			b, _ := os.ReadFile(filepath.Join(out, "f"))
			return strings.Contains(string(b), "PWNED")
		}},
		{"write a new directory", NameWrite, map[string]any{"path": "d/new/f", "content": "PWNED\n"}, func(_ Result, out string) bool {
			_, err := os.Lstat(filepath.Join(out, "new"))
			return err == nil
		}},
		{"read", NameRead, map[string]any{"path": "d/f"}, func(r Result, _ string) bool {
			return !r.IsError && strings.Contains(r.ModelText, outsideSecret)
		}},
		{"edit", NameEdit, map[string]any{"path": "d/f", "old_string": outsideSecret, "new_string": "PWNED"}, func(_ Result, out string) bool {
			b, _ := os.ReadFile(filepath.Join(out, "f"))
			return strings.Contains(string(b), "PWNED")
		}},
		{"grep", NameGrep, map[string]any{"pattern": outsideSecret, "path": "d"}, func(r Result, _ string) bool {
			return !r.IsError && strings.Contains(r.ModelText, outsideSecret)
		}},
		{"grep the workspace", NameGrep, map[string]any{"pattern": outsideSecret}, func(r Result, _ string) bool {
			return !r.IsError && strings.Contains(r.ModelText, outsideSecret)
		}},
		{"glob", NameGlob, map[string]any{"pattern": "*", "cwd": "d"}, func(r Result, _ string) bool {
			return !r.IsError && strings.Contains(r.ModelText, "only-outside")
		}},
		{"glob the workspace", NameGlob, map[string]any{"pattern": "**"}, func(r Result, _ string) bool {
			return !r.IsError && strings.Contains(r.ModelText, "only-outside")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newEnv(t)
			out := outside(t, env)
			for name, data := range map[string]string{"f": outsideSecret + "\n", "only-outside": outsideSecret + "\n"} {
				if err := os.WriteFile(filepath.Join(out, name), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			tool := byName(t, tt.tool)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			stop := exchangeParent(t, ctx, env.Workspace, out, "f")
			calls, escaped := 0, false
			for ; calls < raceCalls() && !escaped && ctx.Err() == nil; calls++ {
				r := runCtx(t, ctx, tool, env, tt.args)
				escaped = tt.escaped(r, out)
			}
			stop()
			if escaped {
				t.Errorf("%s %v went outside the workspace after %d calls", tt.tool, tt.args, calls)
			}
			if b, _ := os.ReadFile(filepath.Join(out, "f")); string(b) != outsideSecret+"\n" {
				t.Errorf("the file outside the workspace was changed: %q", b)
			}
		})
	}
}

// TestParentSwappedForALinkToTheHostIsRefused calls Read, Edit and Grep on
// d/credentials.json while d is exchanged with a relative symlink to the
// storage root inside the workspace, which the lookup may follow: the
// opened file itself is checked, so the credentials never show.
func TestParentSwappedForALinkToTheHostIsRefused(t *testing.T) {
	for _, tt := range []struct {
		name, tool string
		args       map[string]any
	}{
		{"read", NameRead, map[string]any{"path": "d/credentials.json"}},
		{"edit", NameEdit, map[string]any{"path": "d/credentials.json", "old_string": fakeVaultKey, "new_string": "x"}},
		{"grep the file", NameGrep, map[string]any{"pattern": "vault", "path": "d/credentials.json"}},
		{"grep the directory", NameGrep, map[string]any{"pattern": "vault", "path": "d"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env, creds := hostFixture(t)
			tool := byName(t, tt.tool)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			stop := exchangeParent(t, ctx, env.Workspace, filepath.Join(".config", "Maka"), "credentials.json")
			calls, escaped := 0, false
			for ; calls < raceCalls() && !escaped && ctx.Err() == nil; calls++ {
				r := runCtx(t, ctx, tool, env, tt.args)
				escaped = strings.Contains(shown(r), fakeVaultKey)
			}
			stop()
			if escaped {
				t.Errorf("%s %v showed the credentials after %d calls", tt.tool, tt.args, calls)
			}
			if b, err := os.ReadFile(creds); err != nil || !strings.Contains(string(b), fakeVaultKey) {
				t.Errorf("credentials file changed: %q (%v)", b, err)
			}
		})
	}
}
