package cli_test

import (
	"debug/elf"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// otherBuild returns a maka next to a copy of maka-host with another Go
// build ID (one character of its build ID note changed): the same
// program, seen as another build, which that maka starts.
func otherBuild(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	self, err := os.ReadFile(makaBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "maka"), self, 0o755); err != nil {
		t.Fatal(err)
	}
	hostBin := filepath.Join(filepath.Dir(makaBin), "maka-host")
	f, err := elf.Open(hostBin)
	if err != nil {
		t.Fatal(err)
	}
	s := f.Section(".note.go.buildid")
	f.Close()
	if s == nil {
		t.Fatal("the maka-host binary has no Go build ID note")
	}
	b, err := os.ReadFile(hostBin)
	if err != nil {
		t.Fatal(err)
	}
	at := int(s.Offset) + 16 // after the note header and its name "Go\0\0"
	if b[at] == 'A' {
		b[at] = 'B'
	} else {
		b[at] = 'A'
	}
	if err := os.WriteFile(filepath.Join(dir, "maka-host"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "maka")
}

// A command whose host runs another build of maka-host than the one it
// starts (an upgrade since the host started) says so once, on stderr, with what to do; host status
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
	if text := s.run("host", "status", "--root", root); !strings.Contains(text.stdout, "the same as the maka-host this maka starts") {
		t.Fatalf("status (text) of the same build:\n%s", text.stdout)
	}

	r := s.runBin(other, "sessions", "list", "--root", root)
	if r.code != 0 || strings.Count(r.stderr, "runs another build of maka-host") != 1 || !strings.Contains(r.stderr, "maka host stop --root") {
		t.Fatalf("another build: exit %d, stderr %q", r.code, r.stderr)
	}
	st := s.runBin(other, "host", "status", "--json", "--root", root)
	var v statusView
	if err := json.Unmarshal([]byte(st.stdout), &v); err != nil || v.Build != "other" || !v.Running {
		t.Fatalf("status from another build: %+v %v", v, err)
	}
}
