package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A sibling maka-host or maka-tui is run as the user only if nobody else
// could have put it there.
func TestTrustedExecutable(t *testing.T) {
	exe := func(dir string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, "maka-host")
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dirWith := func(mode os.FileMode) string {
		t.Helper()
		d := filepath.Join(t.TempDir(), "d")
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	if err := trustedExecutable(exe(dirWith(0o755), 0o755)); err != nil {
		t.Errorf("own executable in own directory: %v", err)
	}
	if err := trustedExecutable(exe(dirWith(0o777|os.ModeSticky), 0o755)); err != nil {
		t.Errorf("own executable in a sticky shared directory (/tmp): %v", err)
	}
	for name, c := range map[string]struct {
		path string
		want string
	}{
		"writable by others":      {exe(dirWith(0o755), 0o757), "writable by other users"},
		"writable by group":       {exe(dirWith(0o755), 0o775), "writable by other users"},
		"not executable":          {exe(dirWith(0o755), 0o644), "not an executable file"},
		"shared, not sticky":      {exe(dirWith(0o777), 0o755), "every user may write to"},
		"a directory, not a file": {dirWith(0o755), "not an executable file"},
	} {
		if err := trustedExecutable(c.path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
	if os.Geteuid() == 0 {
		p := exe(dirWith(0o777|os.ModeSticky), 0o755)
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if err := trustedExecutable(p); err == nil || !strings.Contains(err.Error(), "belongs to another user") {
			t.Errorf("another user's file in a sticky shared directory: %v", err)
		}
	}
}

// A relative PATH entry is skipped, and does not hide an absolute one
// further on.
func TestSiblingExecutableSkipsRelativePATH(t *testing.T) {
	work, bin := t.TempDir(), t.TempDir()
	for _, d := range []string{work, bin} {
		if err := os.WriteFile(filepath.Join(d, "maka-test-sibling"), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(work)
	t.Setenv("PATH", ".:"+bin)
	got, err := siblingExecutable("maka-test-sibling")
	if err != nil || got != filepath.Join(bin, "maka-test-sibling") {
		t.Fatalf("siblingExecutable = %q, %v; want the one in %s", got, err, bin)
	}
	t.Setenv("PATH", ".")
	if got, err := siblingExecutable("maka-test-sibling"); err == nil {
		t.Fatalf("siblingExecutable ran %q from a relative PATH entry", got)
	}
}
