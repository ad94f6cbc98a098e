package tools

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestConfinement(t *testing.T) {
	env := newEnv(t)
	out := outside(t, env)
	secret := filepath.Join(out, "secret.txt")
	if err := os.WriteFile(secret, []byte("top secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeFile(t, env, "in.txt", "inside\n")
	if err := os.Symlink(secret, filepath.Join(env.Workspace, "leak.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(out, filepath.Join(env.Workspace, "outdir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(out, "missing"), filepath.Join(env.Workspace, "dangling")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, tool string
		args       any
		want       string
	}{
		{"read dotdot", NameRead, map[string]any{"path": "../outside/secret.txt"}, "outside the workspace"},
		{"read nested dotdot", NameRead, map[string]any{"path": "a/../../outside/secret.txt"}, "outside the workspace"},
		{"read absolute outside", NameRead, map[string]any{"path": secret}, "outside the workspace"},
		{"read symlink outside", NameRead, map[string]any{"path": "leak.txt"}, "outside the workspace"},
		{"read through symlinked dir", NameRead, map[string]any{"path": "outdir/secret.txt"}, "outside the workspace"},
		{"write dotdot", NameWrite, map[string]any{"path": "../outside/new.txt", "content": "x"}, "outside the workspace"},
		{"write absolute outside", NameWrite, map[string]any{"path": filepath.Join(out, "new.txt"), "content": "x"}, "outside the workspace"},
		{"write symlinked parent", NameWrite, map[string]any{"path": "outdir/new.txt", "content": "x"}, "outside the workspace"},
		{"write symlinked parent deep", NameWrite, map[string]any{"path": "outdir/sub/new.txt", "content": "x"}, "outside the workspace"},
		{"write over symlink to outside", NameWrite, map[string]any{"path": "leak.txt", "content": "x"}, "outside the workspace"},
		{"write through dangling symlink", NameWrite, map[string]any{"path": "dangling/new.txt", "content": "x"}, "cannot create parent directory"},
		{"write over dangling symlink", NameWrite, map[string]any{"path": "dangling", "content": "x"}, "cannot be resolved"},
		{"write workspace itself", NameWrite, map[string]any{"path": ".", "content": "x"}, "workspace directory"},
		{"edit symlink outside", NameEdit, map[string]any{"path": "leak.txt", "old_string": "top", "new_string": "bottom"}, "outside the workspace"},
		{"edit dotdot", NameEdit, map[string]any{"path": "../outside/secret.txt", "old_string": "top", "new_string": "bottom"}, "outside the workspace"},
		{"glob cwd outside", NameGlob, map[string]any{"pattern": "*", "cwd": ".."}, "outside the workspace"},
		{"glob cwd symlink outside", NameGlob, map[string]any{"pattern": "*", "cwd": "outdir"}, "outside the workspace"},
		{"glob dotdot pattern", NameGlob, map[string]any{"pattern": "../*"}, `".." segment`},
		{"glob absolute pattern", NameGlob, map[string]any{"pattern": "/etc/*"}, "relative"},
		{"grep path outside", NameGrep, map[string]any{"pattern": "secret", "path": "../outside"}, "outside the workspace"},
		{"grep symlink outside", NameGrep, map[string]any{"pattern": "secret", "path": "leak.txt"}, "outside the workspace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustError(t, run(t, byName(t, tt.tool), env, tt.args), tt.want)
		})
	}
	// Nothing outside changed.
	if b, _ := os.ReadFile(secret); string(b) != "top secret\n" {
		t.Errorf("outside file changed: %q", b)
	}
	for _, p := range []string{filepath.Join(out, "new.txt"), filepath.Join(out, "sub"), filepath.Join(out, "missing")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was created outside the workspace", p)
		}
	}
	// Absolute paths inside the workspace are accepted and reported
	// relative.
	r := run(t, byName(t, NameWrite), env, map[string]any{"path": filepath.Join(env.Workspace, "abs", "ok.txt"), "content": "x"})
	mustOK(t, r)
	if got := content(t, r)["path"]; got != "abs/ok.txt" {
		t.Errorf("path = %v, want abs/ok.txt", got)
	}
	if got := text(t, run(t, byName(t, NameRead), env, map[string]any{"path": filepath.Join(env.Workspace, "in.txt")})); got != "inside\n" {
		t.Errorf("absolute read = %q", got)
	}
}

func TestWorkspaceViaSymlink(t *testing.T) {
	env := newEnv(t)
	link := filepath.Join(filepath.Dir(env.Workspace), "wslink")
	if err := os.Symlink(env.Workspace, link); err != nil {
		t.Fatal(err)
	}
	env.Workspace = link
	writeFile(t, env, "f.txt", "x")
	mustOK(t, run(t, byName(t, NameRead), env, map[string]any{"path": "f.txt"}))
	mustOK(t, run(t, byName(t, NameWrite), env, map[string]any{"path": "d/g.txt", "content": "y"}))
	mustOK(t, run(t, byName(t, NameRead), env, map[string]any{"path": filepath.Join(link, "d", "g.txt")}))
	mustError(t, run(t, byName(t, NameRead), env, map[string]any{"path": "../ws/f.txt"}), "outside the workspace")
	mustError(t, run(t, byName(t, NameRead), Env{}, map[string]any{"path": "f.txt"}), "no workspace")
}

// TestNoOpenat2FailsClosed checks that on a kernel without openat2 every
// file tool refuses with a clear error and touches nothing, rather than
// resolving paths some other way.
func TestNoOpenat2FailsClosed(t *testing.T) {
	env := newEnv(t)
	writeFile(t, env, "f.txt", "x\n")
	saved := openat2
	openat2 = func(int, string, *unix.OpenHow) (int, error) { return -1, unix.ENOSYS }
	defer func() { openat2 = saved }()
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{NameRead, map[string]any{"path": "f.txt"}},
		{NameWrite, map[string]any{"path": "new/g.txt", "content": "y"}},
		{NameWrite, map[string]any{"path": "f.txt", "content": "y"}},
		{NameEdit, map[string]any{"path": "f.txt", "old_string": "x", "new_string": "y"}},
		{NameGlob, map[string]any{"pattern": "*"}},
		{NameGrep, map[string]any{"pattern": "x"}},
	} {
		mustError(t, run(t, byName(t, tc.tool), env, tc.args), "openat2")
	}
	if b, _ := os.ReadFile(filepath.Join(env.Workspace, "f.txt")); string(b) != "x\n" {
		t.Errorf("f.txt changed: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(env.Workspace, "new")); err == nil {
		t.Error("Write created a directory without openat2")
	}
}
