package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTUIExecutableMissing: `maka` without maka-tui next to it or on PATH
// says how to build it instead of opening anything.
func TestTUIExecutableMissing(t *testing.T) {
	dir := t.TempDir()
	lone := filepath.Join(dir, "maka")
	b, err := os.ReadFile(makaBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lone, b, 0o755); err != nil {
		t.Fatal(err)
	}
	s := newSandbox(t)
	env := s.env[:0:0]
	for _, kv := range s.env {
		if !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	s.env = append(env, "PATH="+t.TempDir())
	r, err := s.execMaka(lone, nil, []string{"--root", filepath.Join(t.TempDir(), "root")})
	if err != nil {
		t.Fatal(err)
	}
	if r.code != 1 || !strings.Contains(r.stderr, "maka-tui is neither in "+dir+" nor on PATH") ||
		!strings.Contains(r.stderr, "go build -o DIR ./cmd/...") || r.stdout != "" {
		t.Fatalf("maka without maka-tui = %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestTUIExecutableHasNoSubcommands: maka-tui is only the terminal UI;
// the commands are maka's.
func TestTUIExecutableHasNoSubcommands(t *testing.T) {
	s := newSandbox(t)
	r, err := s.execMaka(filepath.Join(filepath.Dir(makaBin), "maka-tui"), nil, []string{"run", "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if r.code != 2 || !strings.Contains(r.stderr, `unknown command "run"`) {
		t.Fatalf("maka-tui run = %d, stderr %q", r.code, r.stderr)
	}
}
