package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/maka-agent/maka/internal/storageroot"
)

// TestFilesOfAnotherUserAreRefused gives each of the root's private files
// to another uid (or opens its mode) in turn and checks that the host, or
// the client reading it, refuses it with a message naming the file.
func TestFilesOfAnotherUserAreRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give files to another uid")
	}
	s := newSandbox(t)
	root, capability := newRoot(t)
	// A first run creates everything: marker, database, secrets, the
	// control directory and its lock.
	p := s.serve(root, "--idle-grace", "0")
	p.kill()
	ns, err := storageroot.ControlNamespace()
	if err != nil {
		t.Fatal(err)
	}
	control := filepath.Join(ns, capability.RootID())
	for _, tc := range []struct {
		name, path string
		mode       os.FileMode // 0: chown to uid 65534 instead
	}{
		{"control directory", control, 0},
		{"owner lock", filepath.Join(control, "owner.lock"), 0},
		{"owner lock mode", filepath.Join(control, "owner.lock"), 0o666},
		{"database", filepath.Join(root, "maka.db"), 0},
		{"database mode", filepath.Join(root, "maka.db"), 0o644},
		{"secrets", filepath.Join(root, "credentials.json"), 0},
		{"secrets mode", filepath.Join(root, "credentials.json"), 0o640},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fi, err := os.Stat(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			if tc.mode != 0 {
				if err := os.Chmod(tc.path, tc.mode); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = os.Chmod(tc.path, fi.Mode().Perm()) })
			} else {
				if err := os.Chown(tc.path, 65534, 65534); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = os.Chown(tc.path, 0, 0) })
			}
			res := s.run("host", "serve", "--root", root, "--idle-grace", "1ms")
			if res.code == 0 || !strings.Contains(res.stderr, filepath.Base(tc.path)) {
				t.Fatalf("host serve with %s: exit %d, stderr:\n%s", tc.name, res.code, res.stderr)
			}
		})
	}
	// A control directory of ours with an open mode is made private again
	// (as the original host does) before anything is put in it.
	if err := os.Chmod(control, 0o755); err != nil {
		t.Fatal(err)
	}
	p = s.serve(root, "--idle-grace", "0")
	if fi, err := os.Stat(control); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("control directory after a start: %v %v", fi.Mode(), err)
	}
	p.kill()

	// A registration that is not this user's is not trusted by clients.
	p = s.serve(root, "--idle-grace", "0")
	defer p.kill()
	reg := filepath.Join(control, "registration.json")
	if err := os.Chown(reg, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	res := s.run("host", "status", "--root", root)
	if res.code == 0 || !strings.Contains(res.stdout+res.stderr, "registration") {
		t.Fatalf("host status with another user's registration: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if err := os.Chown(reg, 0, 0); err != nil {
		t.Fatal(err)
	}
	if res := s.run("host", "status", "--root", root); res.code != 0 {
		t.Fatalf("host status after restoring the registration: exit %d\n%s", res.code, res.stderr)
	}
}
