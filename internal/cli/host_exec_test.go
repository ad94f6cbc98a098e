package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// loneMaka is a copy of maka in a directory of its own, run with a PATH
// that has neither maka-host nor maka-tui.
func loneMaka(t *testing.T) (s *sandbox, lone string) {
	t.Helper()
	dir := t.TempDir()
	lone = filepath.Join(dir, "maka")
	b, err := os.ReadFile(makaBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lone, b, 0o755); err != nil {
		t.Fatal(err)
	}
	s = newSandbox(t)
	env := s.env[:0:0]
	for _, kv := range s.env {
		if !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	s.env = append(env, "PATH="+t.TempDir())
	return s, lone
}

// A command that needs a host, and 'maka host serve', without maka-host
// next to maka or on PATH say how to build it, and start nothing.
func TestHostExecutableMissing(t *testing.T) {
	s, lone := loneMaka(t)
	dir := filepath.Dir(lone)
	for _, args := range [][]string{
		{"sessions", "--root", filepath.Join(t.TempDir(), "root")},
		{"host", "serve", "--root", filepath.Join(t.TempDir(), "root")},
	} {
		r, err := s.execMaka(lone, nil, args)
		if err != nil {
			t.Fatal(err)
		}
		if r.code != 1 || !strings.Contains(r.stderr, "maka-host is neither in "+dir+" nor on PATH") ||
			!strings.Contains(r.stderr, "go build -o DIR ./cmd/...") || r.stdout != "" {
			t.Fatalf("maka %v without maka-host = %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
}

// A host that is already up serves a maka that has no maka-host to start.
func TestHostExecutableMissingButHostRunning(t *testing.T) {
	s, lone := loneMaka(t)
	root, _ := newRoot(t)
	s.serve(root, "--idle-grace", "0")
	r, err := s.execMaka(lone, nil, []string{"sessions", "--root", root})
	if err != nil {
		t.Fatal(err)
	}
	if r.code != 0 || !strings.Contains(r.stderr, "no sessions yet") || strings.Contains(r.stderr, "maka-host") {
		t.Fatalf("maka sessions without maka-host, host up = %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}
