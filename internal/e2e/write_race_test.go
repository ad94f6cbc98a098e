package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/internal/sandbox"
	"github.com/maka-agent/maka/protocol"
)

// exchangeEnv, when set to "target count", makes the test binary a
// command that, in its working directory, makes d a directory and d.link
// a symlink to target and then exchanges the two names count times
// (renameat2 RENAME_EXCHANGE), printing how many it made. A Bash call
// runs it next to file tool calls of the same step.
const exchangeEnv = "MAKA_E2E_EXCHANGE"

// exchangeMain is the test binary run with exchangeEnv.
func exchangeMain(spec string) int {
	target, count, ok := strings.Cut(spec, " ")
	n, err := strconv.Atoi(count)
	if !ok || err != nil {
		fmt.Println("bad", exchangeEnv, spec)
		return 2
	}
	if err := os.MkdirAll("d", 0o755); err != nil {
		fmt.Println(err)
		return 1
	}
	if err := os.Symlink(target, "d.link"); err != nil && !os.IsExist(err) {
		fmt.Println(err)
		return 1
	}
	made := 0
	for ; made < n; made++ {
		if err := unix.Renameat2(unix.AT_FDCWD, "d", unix.AT_FDCWD, "d.link", unix.RENAME_EXCHANGE); err != nil {
			fmt.Println(err)
			break
		}
	}
	fmt.Println("exchanges", made)
	return 0
}

// TestWriteRaceCannotLeaveTheWorkspace is the no-prompt write outside the
// sandbox in execute mode: a Bash call exchanges the directory d with a
// symlink out of the workspace while Write calls of the same step write
// d/pwned.txt. No write may land outside.
func TestWriteRaceCannotLeaveTheWorkspace(t *testing.T) {
	if st := sandbox.Status(); !st.Available {
		t.Skipf("landlock unavailable: %s", st.Reason)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out := outsideTemp(t)
	const writes, exchanges = 30, 150_000
	steps := 4
	if testing.Short() {
		steps = 1 // .ci/run also runs the test in full
	}
	step := 0
	h := newHost(t, func(req *modeltest.Request) modeltest.Reply {
		if step++; step > steps {
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "done"}}}
		}
		c := bashCall(t, fmt.Sprintf("x%d", step), fmt.Sprintf("%s='%s %d' %s", exchangeEnv, out, exchanges, self))
		chunks := []modeltest.Chunk{{Call: &c}}
		for i := 1; i <= writes; i++ {
			w := modeltest.Call{ID: fmt.Sprintf("w%d-%d", step, i), Name: "Write", Arguments: args(t, map[string]any{
				"path": "d/pwned.txt", "content": "PWNED " + strings.Repeat("x", i*2_000) + "\n"})}
			chunks = append(chunks, modeltest.Chunk{Call: &w})
		}
		return modeltest.Reply{Chunks: chunks}
	})
	sid := "write-race"
	createSession(t, h.conn, sid, protocol.PermissionModeExecute)
	runTurn(t, h, sid, "turn-1", "go")
	wrote, refused := 0, 0
	for _, r := range lastResults(t, h) {
		switch s := r.Text(); {
		case strings.Contains(s, "exchanges"):
			t.Logf("bash: %.100s", s)
		case strings.Contains(s, "Wrote"):
			wrote++
		case strings.Contains(s, "outside the workspace"):
			refused++
		}
	}
	t.Logf("%d writes done, %d refused", wrote, refused)
	if _, err := os.Lstat(filepath.Join(out, "pwned.txt")); err == nil {
		t.Errorf("Write in execute mode wrote %s, outside the workspace", filepath.Join(out, "pwned.txt"))
	}
}
