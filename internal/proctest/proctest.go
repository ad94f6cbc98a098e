// Package proctest finds the processes a test started by a marker in their
// argv, and builds the shell command that starts processes escaping their
// shell in every way a shell can (for tests of Bash call containment).
package proctest

import (
	"bytes"
	"os"
	"strconv"
	"testing"
)

// Escapes is how many escaping processes EscapingCommand starts.
const Escapes = 4

// EscapingCommand starts processes that leave the shell's group and
// session (setsid -f, setsid &, (setsid &), a setsid and double fork), each
// a sleep whose argv[0] is marker, waits until all of them run, prints
// "started", then runs then. It makes a FIFO named "ready" in the current
// directory.
func EscapingCommand(marker, then string) string {
	sleeper := "echo up >ready; exec -a " + marker + " sleep 1000"
	return "mkfifo ready && exec 3<>ready || exit 99\n" +
		"setsid -f bash -c '" + sleeper + "'\n" +
		"setsid bash -c '" + sleeper + "' &\n" +
		"(setsid bash -c '" + sleeper + "' &)\n" +
		"(setsid bash -c '(" + sleeper + ") & exit 0' &)\n" +
		"for i in 1 2 3 4; do read -r -u 3 _; done; echo started\n" + then
}

// Marked lists the live processes other than the test's own whose argv
// holds marker.
func Marked(tb testing.TB, marker string) []int {
	tb.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		tb.Fatal(err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && bytes.Contains(b, []byte(marker)) {
			pids = append(pids, pid)
		}
	}
	return pids
}
