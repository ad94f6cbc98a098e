package cli_test

import (
	"debug/elf"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// otherBuild returns a copy of the maka binary with another Go build ID
// (one character of its build ID note changed): the same program, seen as
// another build.
func otherBuild(t *testing.T) string {
	t.Helper()
	f, err := elf.Open(makaBin)
	if err != nil {
		t.Fatal(err)
	}
	s := f.Section(".note.go.buildid")
	f.Close()
	if s == nil {
		t.Fatal("the maka binary has no Go build ID note")
	}
	b, err := os.ReadFile(makaBin)
	if err != nil {
		t.Fatal(err)
	}
	at := int(s.Offset) + 16 // after the note header and its name "Go\0\0"
	if b[at] == 'A' {
		b[at] = 'B'
	} else {
		b[at] = 'A'
	}
	other := filepath.Join(t.TempDir(), "maka-other")
	if err := os.WriteFile(other, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return other
}

// A command whose host runs another build of maka (an upgrade since the
// host started) says so once, on stderr, with what to do; host status
// shows which build the host runs. The same build says nothing.
func TestCommandsNoticeAHostOfAnotherBuild(t *testing.T) {
	other := otherBuild(t)
	s := newSandbox(t)
	root, _ := newRoot(t)
	s.serve(root)

	same := s.run("sessions", "list", "--root", root)
	if same.code != 0 || strings.Contains(same.stderr, "another build") {
		t.Fatalf("same build: exit %d, stderr %q", same.code, same.stderr)
	}
	if v, _ := s.statusJSON("--root", root); v.Build != "same" {
		t.Fatalf("status of the same build: build %q", v.Build)
	}
	if text := s.run("host", "status", "--root", root); !strings.Contains(text.stdout, "the same as this maka") {
		t.Fatalf("status (text) of the same build:\n%s", text.stdout)
	}

	r := s.runBin(other, "sessions", "list", "--root", root)
	if r.code != 0 || strings.Count(r.stderr, "runs another build of maka") != 1 || !strings.Contains(r.stderr, "maka host stop --root") {
		t.Fatalf("another build: exit %d, stderr %q", r.code, r.stderr)
	}
	st := s.runBin(other, "host", "status", "--json", "--root", root)
	var v statusView
	if err := json.Unmarshal([]byte(st.stdout), &v); err != nil || v.Build != "other" || !v.Running {
		t.Fatalf("status from another build: %+v %v", v, err)
	}
}
