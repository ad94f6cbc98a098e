package tools

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeVaultKey is the secret of the fake credentials file; nothing in it
// looks like a secret to the redactor, so only the confinement keeps it
// from the model.
const fakeVaultKey = "fake-vault-key-7f3a9c"

// hostFixture is a workspace that holds the host's files, as when the
// workspace is $HOME: a storage root .config/Maka with credentials.json,
// a control directory run/maka, a symlink into the storage root and one to
// the credentials file. Env.Protected names the storage root through a
// symlink outside the workspace, so that only its real path matches.
func hostFixture(t *testing.T) (env Env, creds string) {
	t.Helper()
	env = newEnv(t)
	root := filepath.Join(env.Workspace, ".config", "Maka")
	creds = writeFile(t, env, ".config/Maka/credentials.json", `{"secrets":{"conn-1":"`+fakeVaultKey+`"}}`+"\n")
	writeFile(t, env, ".config/Maka/maka.db", "db "+fakeVaultKey+"\n")
	writeFile(t, env, ".config/other/settings.txt", "theme dark\n")
	control := filepath.Join(env.Workspace, "run", "maka")
	writeFile(t, env, "run/maka/control.sock.txt", "control "+fakeVaultKey+"\n")
	writeFile(t, env, "notes.txt", "the vault holds "+"fake-vault-"+"entries\n")
	alias := filepath.Join(filepath.Dir(env.Workspace), "storage-alias")
	for _, l := range [][2]string{{root, alias}, {root, filepath.Join(env.Workspace, "rootlink")}, {creds, filepath.Join(env.Workspace, "credlink.json")}} {
		if err := os.Symlink(l[0], l[1]); err != nil {
			t.Fatal(err)
		}
	}
	env.Protected = []string{alias, filepath.Join(alias, "credentials.json"), control}
	return env, creds
}

// shown is what the model and the record get of a result.
func shown(r Result) string { return string(r.Content) + "\n" + r.ModelText }

// TestHostFilesAreNotAvailableToTools drives every file tool the way the
// agent does at a workspace that holds the storage root: no path form
// reaches the credentials file or anything else of the host, and nothing
// is created or changed there.
func TestHostFilesAreNotAvailableToTools(t *testing.T) {
	env, creds := hostFixture(t)
	const refused = "belongs to the maka host"
	tests := []struct {
		name, tool string
		args       map[string]any
	}{
		{"read credentials", NameRead, map[string]any{"path": ".config/Maka/credentials.json"}},
		{"read credentials absolute", NameRead, map[string]any{"path": creds}},
		{"read database", NameRead, map[string]any{"path": ".config/./Maka/maka.db"}},
		{"read through a symlinked directory", NameRead, map[string]any{"path": "rootlink/credentials.json"}},
		{"read a symlink to the credentials", NameRead, map[string]any{"path": "credlink.json"}},
		{"read the control directory", NameRead, map[string]any{"path": "run/maka/control.sock.txt"}},
		{"write credentials", NameWrite, map[string]any{"path": ".config/Maka/credentials.json", "content": "{}"}},
		{"write a symlink to the credentials", NameWrite, map[string]any{"path": "credlink.json", "content": "{}"}},
		{"write a new file in the root", NameWrite, map[string]any{"path": "rootlink/new/x.txt", "content": "x"}},
		{"write a new directory in the root", NameWrite, map[string]any{"path": ".config/Maka/new/x.txt", "content": "x"}},
		{"edit credentials", NameEdit, map[string]any{"path": "credlink.json", "old_string": fakeVaultKey, "new_string": "x"}},
		{"glob in the root", NameGlob, map[string]any{"pattern": "*", "cwd": ".config/Maka"}},
		{"glob through the symlink", NameGlob, map[string]any{"pattern": "*", "cwd": "rootlink"}},
		{"grep the root", NameGrep, map[string]any{"pattern": "key", "path": ".config/Maka"}},
		{"grep the credentials", NameGrep, map[string]any{"pattern": "key", "path": "credlink.json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, byName(t, tt.tool), env, tt.args)
			mustError(t, r, refused)
			mustError(t, r, "outside the workspace")
			if strings.Contains(shown(r), fakeVaultKey) {
				t.Errorf("the result shows the vault key: %s", shown(r))
			}
		})
	}
	if b, err := os.ReadFile(creds); err != nil || !strings.Contains(string(b), fakeVaultKey) {
		t.Errorf("credentials file changed: %q (%v)", b, err)
	}
	for _, p := range []string{".config/Maka/new", ".config/Maka/x.txt"} {
		if _, err := os.Lstat(filepath.Join(env.Workspace, p)); err == nil {
			t.Errorf("%s was created in the storage root", p)
		}
	}

	// A search of the whole workspace finds the rest and skips the host's
	// files.
	t.Run("grep the workspace", func(t *testing.T) {
		r := run(t, byName(t, NameGrep), env, map[string]any{"pattern": "vault"})
		got, _ := grepMatches(t, r)
		if want := []string{"notes.txt:1:the vault holds fake-vault-entries"}; !slices.Equal(got, want) {
			t.Errorf("matches = %q, want %q", got, want)
		}
		if strings.Contains(shown(r), fakeVaultKey) {
			t.Errorf("the result shows the vault key: %s", shown(r))
		}
	})
	for _, args := range []map[string]any{{"pattern": "**/*"}, {"pattern": "**/*", "cwd": ".config"}, {"pattern": "**/credentials.json"}} {
		r := run(t, byName(t, NameGlob), env, args)
		mustOK(t, r)
		for _, f := range strings.Split(r.ModelText, "\n") {
			if strings.Contains(f, "Maka/") || strings.HasPrefix(f, "rootlink/") || strings.HasPrefix(f, "run/maka/") || f == "credlink.json" {
				t.Errorf("Glob %v lists the host's file %s", args, f)
			}
		}
		if args["cwd"] == ".config" && r.ModelText != ".config/other/settings.txt" {
			t.Errorf("Glob %v = %q, want the other settings only", args, r.ModelText)
		}
	}
}

func TestIsProtected(t *testing.T) {
	protected := []string{"/home/u/.config/Maka", "/run/maka/control"}
	for p, want := range map[string]bool{
		"/home/u/.config/Maka":                  true,
		"/home/u/.config/Maka/credentials.json": true,
		"/home/u/.config/Maka2/x":               false,
		"/home/u/.config":                       false,
		"/run/maka/control/sock":                true,
		"/run/maka/controller":                  false,
	} {
		if got := isProtected(protected, p); got != want {
			t.Errorf("isProtected(%s) = %v, want %v", p, got, want)
		}
	}
	if !isProtected([]string{"/"}, "/etc") {
		t.Error("a protected root does not cover /etc")
	}
}

// TestHostFilesThroughRelativeSymlinks reaches the host's files through
// relative symlinks inside the workspace, which the kernel lets a lookup
// follow: the check of what was opened refuses them all the same, and the
// walks leave them out.
func TestHostFilesThroughRelativeSymlinks(t *testing.T) {
	env, creds := hostFixture(t)
	for link, target := range map[string]string{
		"relroot": ".config/Maka", "relcred.json": ".config/Maka/credentials.json", "relrun": "run", "relconfig": ".config",
	} {
		if err := os.Symlink(target, filepath.Join(env.Workspace, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		tool string
		args map[string]any
	}{
		{NameRead, map[string]any{"path": "relcred.json"}},
		{NameRead, map[string]any{"path": "relroot/credentials.json"}},
		{NameRead, map[string]any{"path": "relconfig/Maka/maka.db"}},
		{NameRead, map[string]any{"path": "relrun/maka/control.sock.txt"}},
		{NameWrite, map[string]any{"path": "relcred.json", "content": "{}"}},
		{NameWrite, map[string]any{"path": "relroot/new.txt", "content": "x"}},
		{NameWrite, map[string]any{"path": "relconfig/Maka/new/x.txt", "content": "x"}},
		{NameEdit, map[string]any{"path": "relcred.json", "old_string": fakeVaultKey, "new_string": "x"}},
		{NameGlob, map[string]any{"pattern": "*", "cwd": "relroot"}},
		{NameGrep, map[string]any{"pattern": "key", "path": "relroot"}},
		{NameGrep, map[string]any{"pattern": "key", "path": "relcred.json"}},
	} {
		r := run(t, byName(t, tt.tool), env, tt.args)
		if !r.IsError || !strings.Contains(text(t, r), "belongs to the maka host") || strings.Contains(shown(r), fakeVaultKey) {
			t.Errorf("%s %v = %s, want the host's refusal", tt.tool, tt.args, shown(r))
		}
	}
	if b, err := os.ReadFile(creds); err != nil || !strings.Contains(string(b), fakeVaultKey) {
		t.Errorf("credentials file changed: %q (%v)", b, err)
	}
	for _, p := range []string{".config/Maka/new.txt", ".config/Maka/new"} {
		if _, err := os.Lstat(filepath.Join(env.Workspace, p)); err == nil {
			t.Errorf("%s was created in the storage root", p)
		}
	}
	for _, args := range []map[string]any{{"pattern": "**"}, {"pattern": "**", "cwd": "relconfig"}} {
		for _, f := range strings.Split(run(t, byName(t, NameGlob), env, args).ModelText, "\n") {
			if strings.HasPrefix(f, "relroot/") || strings.HasPrefix(f, "relconfig/Maka/") || strings.HasPrefix(f, "relrun/maka/") ||
				f == "relcred.json" || strings.Contains(f, "Maka/") {
				t.Errorf("Glob %v lists the host's file %s", args, f)
			}
		}
	}
	if r := run(t, byName(t, NameGrep), env, map[string]any{"pattern": "key"}); strings.Contains(shown(r), fakeVaultKey) {
		t.Errorf("Grep of the workspace shows the vault key: %s", shown(r))
	}
}
